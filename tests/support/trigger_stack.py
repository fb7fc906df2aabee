"""A real stack for the trigger tests (webhooks, background runs): the HTTP gateway in front of a real
orchestrator (test Redis, loopback egress allowed) and llm_gateway, two tenants, and a gate: an HTTP server an
Invoke component calls, which answers only once the test opens it, so a run is held mid-way without sleeps.

    async with trigger_stack(redis_server.url) as s:
        agent_id = await s.create(gated_canvas(s.gate.url))   # draft, tenant A
        ... s.gate.opened.set() ...
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.orchestrator.engine.settings import EngineSettings
from tests.support.agent_services import SCRIPTS, AgentStack, cpn
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator


@dataclass
class Gate:
    url: str = ""
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)  # a run is waiting at the gate

    async def handle(self, request: web.Request) -> web.Response:
        self.reached.set()
        await self.opened.wait()
        return web.Response(text="gate open")


def gated_canvas(gate_url: str, begin: dict[str, Any] | None = None, content: str = "done: {Invoke:Gate@result}") -> dict:
    """Begin -> Invoke (waits at the gate) -> Message."""
    return {"components": {
        "begin": cpn("Begin", ["Invoke:Gate"], begin or {}),
        "Invoke:Gate": cpn("Invoke", ["Message:Out"], {"url": gate_url, "method": "get", "timeout": 120}, ("begin",)),
        "Message:Out": cpn("Message", [], {"content": [content]}, ("Invoke:Gate",)),
    }}


@dataclass
class TriggerStack(AgentStack):
    """The agent stack with a gate its runs can be held at (`gate_canvas`), and tenant A's id."""

    gate: Gate = field(default_factory=Gate)
    tenant_a: str = ""

    async def create(self, dsl: dict, *, key: str | None = None) -> str:  # a draft: never published
        return await super().create(dsl, key=key, publish=False)


@asynccontextmanager
async def trigger_stack(redis_url: str, **orchestrator_cfg: Any) -> AsyncIterator[TriggerStack]:
    """`orchestrator_cfg`: more OrchestratorConfig fields (triggers=TriggerSettings(webhook_poll_s=...))."""
    run = uuid.uuid4().hex[:8]
    key_a, key_b = f"trig-a-{run}", f"trig-b-{run}"
    gate = Gate()
    gate_app = web.Application()
    gate_app.router.add_get("/gate", gate.handle)
    gate_server = TestServer(gate_app, host="127.0.0.1")
    await gate_server.start_server()
    gate.url = str(gate_server.make_url("/gate"))
    engine = EngineSettings(ssrf_allowlist=("127.0.0.1",))
    try:
        async with llm_gateway(SCRIPTS) as llm, orchestrator(
                redis_url, llm_gateway_addr=llm.addr, engine=engine, **orchestrator_cfg) as orch:
            cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0,
                                upstreams={"orchestrator": orch.addr, "llm_gateway": llm.addr,
                                           "retrieval": f"127.0.0.1:{free_port()}", "sandbox": f"127.0.0.1:{free_port()}"},
                                api_keys={key_a: f"tenant-a-{run}", key_b: f"tenant-b-{run}"})
            client = TestClient(TestServer(create_app(cfg), host="127.0.0.1"))
            await client.start_server()
            try:
                yield TriggerStack(client=client, key_a=key_a, key_b=key_b, config=cfg, gate=gate, tenant_a=f"tenant-a-{run}")
            finally:
                gate.opened.set()  # no run stays held at the gate
                await client.close()
    finally:
        await gate_server.close()
