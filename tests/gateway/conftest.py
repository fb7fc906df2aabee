"""Gateway fixtures: a scripted orchestrator on a real gRPC port, the real app on a real HTTP port.

Tests import nothing from here: the `stack` fixture carries the keys, tenants and helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fakes.orchestrator import FakeOrchestrator
from helpers import free_port

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common.testing import start_server


@dataclass
class Stack:
    fake: FakeOrchestrator
    client: TestClient
    orchestrator_port: int
    key_a: str = "key-of-a"
    key_b: str = "key-of-b"
    tenant_a: str = "tenant-a"
    tenant_b: str = "tenant-b"

    @property
    def url(self) -> str:
        return str(self.client.server.make_url("")).rstrip("/")

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key_a}"}

    def config(self, **overrides) -> GatewayConfig:
        upstreams = {name: f"127.0.0.1:{free_port()}" for name in ("llm_gateway", "retrieval", "sandbox")}
        upstreams["orchestrator"] = f"127.0.0.1:{self.orchestrator_port}"
        fields = dict(host="127.0.0.1", port=0, upstreams=upstreams, health_timeout_s=1.0,
                      api_keys={self.key_a: self.tenant_a, self.key_b: self.tenant_b}, max_body_bytes=64 * 1024)
        return GatewayConfig(**{**fields, **overrides})


@pytest.fixture
async def stack():
    fake = FakeOrchestrator()
    server, port = await start_server(fake.bindings(), service="orchestrator")
    s = Stack(fake=fake, client=None, orchestrator_port=port)  # type: ignore[arg-type]
    s.client = TestClient(TestServer(create_app(s.config())))
    await s.client.start_server()
    try:
        yield s
    finally:
        await s.client.close()
        await server.stop(None)
