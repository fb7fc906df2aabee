"""Prometheus metrics of model calls, per provider (the factory, e.g. "OpenAI", "Local") and model."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

TOKENS = Counter(
    "trellis_llm_tokens_total",
    "Tokens sent to (direction=in) and produced by (direction=out) models, as the provider reports them",
    ["provider", "model", "direction"],
)
TIME_TO_FIRST_TOKEN = Histogram(
    "trellis_llm_time_to_first_token_seconds",
    "From the Chat call to its first content or tool-call delta",
    ["provider", "model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60),
)
LATENCY = Histogram(
    "trellis_llm_request_seconds",
    "Whole model calls, retries included (for chat: until the last delta)",
    ["provider", "model", "op"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
ERRORS = Counter(
    "trellis_llm_errors_total",
    "Model calls that failed, by gRPC status code (CANCELLED: the caller went away)",
    ["provider", "model", "op", "code"],
)
RETRIES = Counter(
    "trellis_llm_retries_total", "Provider errors that were retried", ["provider", "model", "op"]
)
