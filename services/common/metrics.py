"""Prometheus metrics per RPC: count (by status code), latency, errors."""

from __future__ import annotations

import asyncio

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RPC_TOTAL = Counter(
    "trellis_grpc_requests_total", "gRPC requests handled, by final status code", ["service", "method", "code"]
)
RPC_ERRORS = Counter("trellis_grpc_errors_total", "gRPC requests that ended with a non-OK status", ["service", "method", "code"])
RPC_LATENCY = Histogram(
    "trellis_grpc_request_seconds",
    "gRPC request latency (for streams: until the last message)",
    ["service", "method"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)

# Probes and discovery are not traffic: counting them would drown the real numbers. Nor is a stream that carries
# calls (the internal ChatTurnService and RunTurnService, services/common/turns/): each of its turns is counted and
# traced as the call it stands for, and the carrier, open for minutes, would only add a span and a latency of its
# own lifetime.
UNMETERED_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.", "/trellis.llm.internal.v1.ChatTurnService/",
                      "/trellis.canvas.internal.v1.RunTurnService/")


# A count that only grows is a leak: the soak (chaos/soak.py) checks it comes back to its baseline when idle.
ASYNCIO_TASKS = Gauge("trellis_asyncio_tasks", "asyncio tasks not yet done in the process's event loop")


def count_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Read the loop's tasks at each scrape (the exporter's thread may ask: all_tasks copies the set safely)."""
    ASYNCIO_TASKS.set_function(lambda: len(asyncio.all_tasks(loop)))


def start_exporter(port: int) -> None:
    if port:
        start_http_server(port)
