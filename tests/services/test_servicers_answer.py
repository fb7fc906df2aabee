"""Every service's real servicers start on port 0 through the common test helper and answer health and
reflection for their own service names (the processes themselves are covered by the `trellis up` test)."""

from __future__ import annotations

import grpc
from helpers import health_status, reflected_services

from services.common.testing import start_server


async def _check(bindings, *expected: str) -> None:
    server, port = await start_server(bindings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            names = await reflected_services(channel)
            for service in expected:
                assert await health_status(channel, service) == "SERVING"
                assert service in names
            assert "grpc.health.v1.Health" in names
    finally:
        await server.stop(None)


async def test_orchestrator_servicers(orchestrator_addr):
    async with grpc.aio.insecure_channel(orchestrator_addr) as channel:
        names = await reflected_services(channel)
        for service in ("trellis.canvas.v1.CanvasService", "trellis.canvas.v1.AgentService", "trellis.canvas.v1.SessionService"):
            assert service in names
            assert await health_status(channel, service) == "SERVING"


async def test_llm_gateway_servicer():
    from services.llm_gateway.config import LlmGatewayConfig
    from services.llm_gateway.gateway import LlmGateway
    from services.llm_gateway.server import LlmServicer

    gateway = LlmGateway.create(LlmGatewayConfig.for_tests())
    try:
        await _check([LlmServicer(gateway).binding()], "trellis.llm.v1.LlmService")
    finally:
        await gateway.aclose()


async def test_sandbox_servicer():
    from services.sandbox.config import SandboxConfig
    from services.sandbox.server import SandboxServicer

    servicer = SandboxServicer(SandboxConfig.from_env())
    await servicer.start()
    await _check([servicer.binding()], "trellis.sandbox.v1.SandboxService")


async def test_retrieval_servicer(tmp_path, monkeypatch):
    from services.retrieval.config import RetrievalConfig
    from services.retrieval.server import RetrievalServicer

    monkeypatch.setenv("TRELLIS_DATA_DIR", str(tmp_path))
    servicer = RetrievalServicer.from_config(RetrievalConfig.from_env())
    await servicer.start()
    try:
        await _check([servicer.binding()], "trellis.retrieval.v1.RetrievalService")
    finally:
        await servicer.aclose()
