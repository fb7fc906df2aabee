"""Every service's real servicers start on port 0 through the common test helper and answer health and
reflection for their own service names (the processes themselves are covered by the `trellis up` test)."""

from __future__ import annotations

import grpc

from services.common.server import Service
from services.common.testing import start_service, stop_service
from tests.support.net import health_status, reflected_services


async def _check(service: Service, *expected: str) -> None:
    """`service` is what the service's `app.build(config)` returns, started as `serve()` starts it."""
    server, port = await start_service(service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            names = await reflected_services(channel)
            for name in expected:
                assert await health_status(channel, name) == "SERVING"
                assert name in names
            assert "grpc.health.v1.Health" in names
    finally:
        await stop_service(server, service)


async def test_orchestrator_servicers(orchestrator_addr):
    async with grpc.aio.insecure_channel(orchestrator_addr) as channel:
        names = await reflected_services(channel)
        for service in ("trellis.canvas.v1.CanvasService", "trellis.canvas.v1.AgentService", "trellis.canvas.v1.SessionService"):
            assert service in names
            assert await health_status(channel, service) == "SERVING"


async def test_llm_gateway_servicer():
    from services.llm_gateway.app import build
    from services.llm_gateway.config import LlmGatewayConfig

    await _check(build(LlmGatewayConfig.for_tests()), "trellis.llm.v1.LlmService")


async def test_sandbox_servicer():
    from services.sandbox.app import build
    from services.sandbox.config import SandboxConfig

    await _check(build(SandboxConfig.from_env()), "trellis.sandbox.v1.SandboxService")


async def test_retrieval_servicer(tmp_path, monkeypatch):
    from services.retrieval.app import build
    from services.retrieval.config import RetrievalConfig

    monkeypatch.setenv("TRELLIS_DATA_DIR", str(tmp_path))
    await _check(build(RetrievalConfig.from_env()), "trellis.retrieval.v1.RetrievalService")
