"""Gateway fixtures: a scripted orchestrator on a real gRPC port, the real app on a real HTTP port.

Tests import nothing from here: the `stack` fixture carries the keys, tenants and helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common.testing import start_server
from tests.support.fake_orchestrator import FakeOrchestrator
from tests.support.net import free_port


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


@dataclass
class Live:
    """The gateway in front of the real orchestrator (test Redis), the real retrieval service (SQLite) and a
    real llm_gateway with scripted models; fresh tenants per test."""

    client: TestClient
    key_a: str
    key_b: str

    @property
    def url(self) -> str:
        return str(self.client.server.make_url("")).rstrip("/")

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key_a}"}

    async def call(self, method: str, path: str, *, key: str | None = None, **kw) -> dict:
        """A RAGFlow call with key A (or `key`): its JSON body, whatever the HTTP status."""
        headers = {**self.auth(key), **kw.pop("headers", {})}
        resp = await self.client.request(method, path, headers=headers, **kw)
        return await resp.json()


@pytest.fixture
async def live(orchestrator_addr, tmp_path):
    import uuid

    from tests.support.retrieval import embedding_gateway, running_stack

    async with embedding_gateway() as llm, running_stack("sqlite", tmp_path, llm) as svc:
        run = uuid.uuid4().hex[:8]  # the test Redis lives for the whole session
        key_a, key_b = f"live-a-{run}", f"live-b-{run}"
        cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0,
                            upstreams={"orchestrator": orchestrator_addr, "retrieval": f"127.0.0.1:{svc.port}",
                                       "llm_gateway": llm, "sandbox": f"127.0.0.1:{free_port()}"},
                            api_keys={key_a: f"tenant-a-{run}", key_b: f"tenant-b-{run}"})
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        try:
            yield Live(client, key_a, key_b)
        finally:
            await client.close()
