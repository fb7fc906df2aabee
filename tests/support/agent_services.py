"""A real stack for the MCP and A2A doors' tests: the HTTP gateway on a real port in front of a real orchestrator
(test Redis) and llm_gateway, whose scripted model `slow@Scripted` streams a long answer slowly enough to be
cancelled or rejoined mid-run; two tenants, and the canvases the tests publish.

    async with agent_stack(redis_server.url) as s:
        agent_id = await s.create(ECHO, title="Echo bot")          # published, tenant A
        s.url, s.key_a, s.key_b, await s.get(path, key=...)
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.orchestrator.engine.settings import EngineSettings
from services.orchestrator.triggers.settings import TriggerSettings
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator

LONG_ANSWER = " ".join(f"w{i}" for i in range(120))
SCRIPTS = {"chat": {"slow": [{"reply": LONG_ANSWER, "chunk_delay_s": 0.05}]}}


def cpn(name: str, down: list[str], params: dict[str, Any] | None = None, up: tuple[str, ...] = ()) -> dict:
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


ECHO = {"components": {
    "begin": cpn("Begin", ["Message:Out"], {"inputs": {"tone": {"name": "Tone", "type": "options", "optional": True,
                                                                "options": ["warm", "dry"]}}}),
    "Message:Out": cpn("Message", [], {"content": ["You said: {sys.query}"]}, ("begin",)),
}}
FILL_UP = {"components": {
    "begin": cpn("Begin", ["UserFillUp:Ask"]),
    "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
        "tips": "Which city?", "inputs": {"city": {"name": "city", "type": "line", "optional": False}}}, ("begin",)),
    "Message:Out": cpn("Message", [], {"content": ["Going to {UserFillUp:Ask@city}"]}, ("UserFillUp:Ask",)),
}}
SLOW = {"components": {
    "begin": cpn("Begin", ["LLM:Talk"]),
    "LLM:Talk": cpn("LLM", ["Message:Out"], {"llm_id": "slow@Scripted", "sys_prompt": "Talk.",
                                              "prompts": [{"role": "user", "content": "{sys.query}"}]}, ("begin",)),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Talk@content}"]}, ("LLM:Talk",)),
}}


@dataclass
class AgentStack:
    client: TestClient
    key_a: str
    key_b: str
    config: GatewayConfig  # another gateway on the same orchestrator: create_app(stack.config)

    @property
    def url(self) -> str:
        return str(self.client.server.make_url("")).rstrip("/")

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key_a}"}

    async def call(self, method: str, path: str, *, key: str | None = None, **kw: Any) -> dict:
        resp = await self.client.request(method, path, headers=self.auth(key), **kw)
        return await resp.json()

    async def create(self, dsl: dict, *, title: str | None = None, key: str | None = None, publish: bool = True,
                     description: str = "") -> str:
        body = await self.call("POST", "/api/v1/agents", key=key, json={
            "title": title or uuid.uuid4().hex, "dsl": dsl, "description": description, "release": publish})
        assert body["code"] == 0, body
        return body["data"]["id"]


@asynccontextmanager
async def agent_stack(redis_url: str) -> AsyncIterator[AgentStack]:
    run = uuid.uuid4().hex[:8]
    key_a, key_b = f"svc-a-{run}", f"svc-b-{run}"
    # A2A push receivers are on loopback: the orchestrator's SSRF guard allows it; deliveries are polled and
    # retried at once.
    async with llm_gateway(SCRIPTS) as llm, orchestrator(
            redis_url, llm_gateway_addr=llm.addr, engine=EngineSettings(ssrf_allowlist=("127.0.0.1",)),
            triggers=TriggerSettings(webhook_poll_s=0.05, webhook_retry_base_s=0.05)) as orch:
        cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0,
                            upstreams={"orchestrator": orch.addr, "llm_gateway": llm.addr,
                                       "retrieval": f"127.0.0.1:{free_port()}", "sandbox": f"127.0.0.1:{free_port()}"},
                            api_keys={key_a: f"tenant-a-{run}", key_b: f"tenant-b-{run}"}, a2a_push_private_hosts=True)
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        try:
            yield AgentStack(client, key_a, key_b, cfg)
        finally:
            await client.close()
