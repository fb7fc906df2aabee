"""Test helper: a real gRPC server on an ephemeral port, with the production interceptors and health."""

from __future__ import annotations

from typing import Sequence

import grpc
from grpc_health.v1 import health_pb2

from services.common.server import Binding, Service, build_server, set_health


async def start_server(bindings: Sequence[Binding], service: str = "test") -> tuple[grpc.aio.Server, int]:
    """Start `bindings` on 127.0.0.1:0 and mark them SERVING. The caller stops the server (`await server.stop(None)`)."""
    server, health = await build_server(service, bindings)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await set_health(health, bindings, health_pb2.HealthCheckResponse.SERVING)
    return server, port


async def start_service(service: Service, name: str = "test") -> tuple[grpc.aio.Server, int]:
    """What `serve()` does for what `app.build(config)` returned, on 127.0.0.1:0: start-up hooks, then the
    server. The caller ends it with `stop_service(server, service)`."""
    for hook in service.on_startup:
        await hook()
    return await start_server(service.bindings, name)


async def stop_service(server: grpc.aio.Server | None, service: Service) -> None:
    """Stop the server (None: it never started), then run the shutdown hooks."""
    if server is not None:
        await server.stop(None)
    for hook in service.on_shutdown:
        await hook()
