"""Test helper: a real gRPC server on an ephemeral port, with the production interceptors and health."""

from __future__ import annotations

from typing import Sequence

import grpc
from grpc_health.v1 import health_pb2

from services.common.server import Binding, build_server, set_health


async def start_server(bindings: Sequence[Binding], service: str = "test") -> tuple[grpc.aio.Server, int]:
    """Start `bindings` on 127.0.0.1:0 and mark them SERVING. The caller stops the server (`await server.stop(None)`)."""
    server, health = await build_server(service, bindings)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await set_health(health, bindings, health_pb2.HealthCheckResponse.SERVING)
    return server, port
