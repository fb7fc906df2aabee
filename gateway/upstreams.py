"""The gateway's gRPC channels to the services, opened once per process."""

from __future__ import annotations

import asyncio

import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.channels import open_channel


class Upstreams:
    def __init__(self, addresses: dict[str, str]) -> None:
        self.addresses = addresses
        # The orchestrator's calls (gateway/orchestrator.py) pass the request id and trace headers themselves.
        self.channels = {name: open_channel(addr) for name, addr in addresses.items()}

    async def health(self, timeout_s: float) -> dict[str, str]:
        """Service name -> "SERVING", "NOT_SERVING", or "UNREACHABLE (<reason>)", checked concurrently."""

        async def check(name: str) -> tuple[str, str]:
            stub = health_pb2_grpc.HealthStub(self.channels[name])
            try:
                resp = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
            except grpc.aio.AioRpcError as exc:
                return name, f"UNREACHABLE ({exc.code().name})"
            return name, health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

        return dict(await asyncio.gather(*(check(n) for n in self.channels)))

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in self.channels.values()))


UPSTREAMS = web.AppKey("upstreams", Upstreams)  # the app's channels to the services (gateway/app.py opens them)
