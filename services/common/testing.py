"""Test helper: a real gRPC server on an ephemeral port, with the production interceptors and health."""

from __future__ import annotations

from typing import Sequence

import grpc
from grpc_health.v1 import health_pb2

from services.common.server import Binding, Service, build_server, set_health


async def start_server(bindings: Sequence[Binding], service: str = "test", *, port: int = 0) -> tuple[grpc.aio.Server, int]:
    """Start `bindings` on 127.0.0.1:`port` (0: a free one) and mark them SERVING. The caller stops the server
    (`await server.stop(None)`); a given port lets a test start a service again where clients know it."""
    server, health = await build_server(service, bindings)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await set_health(health, bindings, health_pb2.HealthCheckResponse.SERVING)
    return server, port


async def start_service(service: Service, name: str = "test", *, port: int = 0) -> tuple[grpc.aio.Server, int]:
    """What `serve()` does for what `app.build(config)` returned, on 127.0.0.1:`port` (0: a free one):
    start-up hooks, then the server. The caller ends it with `stop_service(server, service)`."""
    for hook in service.on_startup:
        await hook()
    return await start_server(service.bindings, name, port=port)


async def stop_service(server: grpc.aio.Server | None, service: Service) -> None:
    """Stop the server (None: it never started), then run the shutdown hooks."""
    if server is not None:
        await server.stop(None)
    for hook in service.on_shutdown:
        await hook()
