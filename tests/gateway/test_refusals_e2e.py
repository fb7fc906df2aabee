"""Refusals through the real stack: the gateway in front of a real orchestrator (test Redis) whose limits file
allows tenant A one run at a time, and a real llm_gateway with a slow scripted model. While A's one run holds
its slot, A's next run is refused at once in all three dialects (HTTP 429, Retry-After, RateLimit headers, the
dialect's shape; the official OpenAI client raises RateLimitError), leaving no session behind, while tenant
B is admitted; once A's run ends, A is admitted again. The run viewer's admission route shows each tenant the
orchestrator's figures of its own runs."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

import openai
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from tests.support.agent_services import ECHO, cpn
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator
from tests.support.waiting import eventually


# A run that holds its slot until its stream is closed: a model that answers a word every 0.2 s, for minutes.
SCRIPTS = {"chat": {"held": [{"reply": " ".join(["word"] * 1000), "chunk_delay_s": 0.2}]}}
HELD = {"components": {
    "begin": cpn("Begin", ["LLM:Talk"]),
    "LLM:Talk": cpn("LLM", ["Message:Out"], {"llm_id": "held@Scripted", "sys_prompt": "Talk.",
                                              "prompts": [{"role": "user", "content": "{sys.query}"}]}, ("begin",)),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Talk@content}"]}, ("LLM:Talk",)),
}}


@asynccontextmanager
async def limited_stack(redis_url: str, limits_file: str, tenant_a: str, tenant_b: str):
    key_a, key_b = f"key-a-{uuid.uuid4().hex[:8]}", f"key-b-{uuid.uuid4().hex[:8]}"
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_url, llm_gateway_addr=llm.addr,
                                                         limits_file=limits_file) as orch:
        cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0, api_keys={key_a: tenant_a, key_b: tenant_b},
                            upstreams={"orchestrator": orch.addr, "llm_gateway": llm.addr,
                                       "retrieval": f"127.0.0.1:{free_port()}", "sandbox": f"127.0.0.1:{free_port()}"})
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        try:
            yield client, {"Authorization": f"Bearer {key_a}"}, {"Authorization": f"Bearer {key_b}"}, key_a
        finally:
            await client.close()


@pytest.fixture
async def stack(redis_server, tmp_path):
    run = uuid.uuid4().hex[:8]
    tenant_a, tenant_b = f"tenant-a-{run}", f"tenant-b-{run}"
    limits = tmp_path / "limits.yaml"
    limits.write_text(yaml.safe_dump({"tenants": {tenant_a: {"concurrent_runs": 1}}}))
    async with limited_stack(redis_server.url, str(limits), tenant_a, tenant_b) as (client, auth_a, auth_b, key_a):
        yield client, auth_a, auth_b, key_a, tenant_a


async def _agent(client: TestClient, auth: dict, dsl: dict) -> str:
    body = await (await client.post("/api/v1/agents", headers=auth, json={"title": uuid.uuid4().hex, "dsl": dsl,
                                                                           "release": True})).json()
    assert body["code"] == 0, body
    return body["data"]["id"]


async def _sessions(client: TestClient, auth: dict, agent_id: str) -> int:
    body = await (await client.get(f"/api/v1/agents/{agent_id}/sessions?page_size=100", headers=auth)).json()
    return len(body["data"])


async def test_a_tenant_over_its_limit_is_refused_in_every_dialect_while_another_is_admitted(stack):
    client, auth_a, auth_b, key_a, tenant_a = stack
    held_a, echo_a, echo_b = await _agent(client, auth_a, HELD), await _agent(client, auth_a, ECHO), \
        await _agent(client, auth_b, ECHO)

    # A's one run holds its slot: a slow answer, streamed, read until its first token.
    holder = await client.post("/api/v1/agents/chat/completions", headers=auth_a,
                               json={"agent_id": held_a, "query": "talk", "stream": True})
    assert holder.status == 200
    await holder.content.readuntil(b'"event": "message"')
    sessions_before = await _sessions(client, auth_a, echo_a)

    ragflow = await client.post("/api/v1/agents/chat/completions", headers=auth_a,
                                json={"agent_id": echo_a, "query": "hi", "stream": True})
    envelope = await client.post(f"/api/v1/agents/{echo_a}/stream", headers=auth_a, json={"query": "hi"})
    for resp in (ragflow, envelope):
        assert resp.status == 429 and resp.content_type == "application/json"
        assert int(resp.headers["Retry-After"]) >= 1
        assert "concurrent_runs" in resp.headers["RateLimit-Policy"] and resp.headers["RateLimit"]
    body = await ragflow.json()
    assert body["code"] == 400 and tenant_a in body["message"]
    data = (await envelope.json())["data"]
    assert (data["code"], data["tenant"], data["limit"]) == ("RESOURCE_EXHAUSTED", tenant_a, "concurrent_runs")

    async with openai.AsyncOpenAI(api_key=key_a, base_url=str(client.make_url("/v1")), max_retries=0) as sdk:
        with pytest.raises(openai.RateLimitError) as caught:
            await sdk.chat.completions.create(model=echo_a, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "rate_limit_exceeded" and int(caught.value.response.headers["retry-after"]) >= 1
    assert await _sessions(client, auth_a, echo_a) == sessions_before  # a refusal claims no session

    admitted = await (await client.post("/api/v1/agents/chat/completions", headers=auth_b,
                                        json={"agent_id": echo_b, "query": "hi"})).json()
    assert admitted["code"] == 0 and admitted["data"]["data"]["content"] == "You said: hi"

    holder.close()  # A's run is cancelled with its stream and gives its slot back

    async def a_admitted() -> bool:
        resp = await client.post("/api/v1/agents/chat/completions", headers=auth_a,
                                 json={"agent_id": echo_a, "query": "again"})
        return resp.status == 200 and (await resp.json())["code"] == 0

    await eventually(a_admitted, what="A admitted once its run ended", timeout=30)


async def test_the_viewers_admission_route_shows_the_orchestrators_figures_of_the_keys_tenant_only(stack):
    """GET /api/v1/tenant/admission through the real orchestrator (GetTenantAdmission): A's run admitted and
    running, its refusals by limit, its limits; B's figures are B's alone."""
    client, auth_a, auth_b, _, tenant_a = stack
    held_a, echo_a, echo_b = await _agent(client, auth_a, HELD), await _agent(client, auth_a, ECHO), \
        await _agent(client, auth_b, ECHO)

    async def figures(auth: dict) -> dict:
        body = await (await client.get("/api/v1/tenant/admission", headers=auth)).json()
        assert body["code"] == 0, body
        return body["data"]

    holder = await client.post("/api/v1/agents/chat/completions", headers=auth_a,
                               json={"agent_id": held_a, "query": "talk", "stream": True})
    await holder.content.readuntil(b'"event": "message"')
    for _ in range(2):
        refused = await client.post(f"/api/v1/agents/{echo_a}/stream", headers=auth_a, json={"query": "hi"})
        assert refused.status == 429
    admitted_b = await client.post("/api/v1/agents/chat/completions", headers=auth_b,
                                   json={"agent_id": echo_b, "query": "hi"})
    assert (await admitted_b.json())["code"] == 0

    async def a_counted() -> dict | None:
        found = await figures(auth_a)
        return found if (found["admitted"], found["running"]) == (1, 1) and found["refused"] == 2 else None

    a = await eventually(a_counted, what="A's figures from the orchestrator")
    assert (a["tenant"], a["source"], a["replicas"]) == (tenant_a, "orchestrator", 1)
    assert a["refused_by_limit"] == {"concurrent_runs": 2} and a["waiting"] == 0
    assert a["tokens"] == 0 and a["tokens_last_minute"] == 0  # the held model call has not ended
    assert a["limits"]["concurrent_runs"] == 1 and a["limits"]["tokens_per_minute"] is None

    async def b_counted() -> dict | None:
        found = await figures(auth_b)
        return found if found["admitted"] == 1 and found["running"] == 0 else None

    b = await eventually(b_counted, what="B's figures from the orchestrator")
    assert (b["refused"], b["refused_by_limit"], b["limits"]["concurrent_runs"]) == (0, {}, None)
    holder.close()  # A's run is cancelled: no longer running, still admitted

    async def a_ended() -> bool:
        found = await figures(auth_a)
        return (found["admitted"], found["running"]) == (1, 0)

    await eventually(a_ended, what="A's run's end in its figures")
