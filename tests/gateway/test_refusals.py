"""Admission refusals at the edge (gateway/refusal.py): the scripted orchestrator refuses tenant A as the
orchestrator's admission does (RESOURCE_EXHAUSTED, RetryInfo and QuotaFailure in its rich status details,
RateLimit headers in its trailing metadata), on a real gRPC port and through the real turn transport. Every
door that starts a run answers it in its own shape with the retry delay, before any stream starts, while
tenant B is admitted; a refusal that reaches an open stream is the dialect's error event; each is counted."""

from __future__ import annotations

import hashlib
import json
import uuid

import httpx
import openai
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from prometheus_client.parser import text_string_to_metric_families

from gateway.refusal import JSONRPC_REFUSED

DELAY_S = 1.5  # Retry-After: 2, whole seconds rounded up
POLICY = '"concurrent_runs";q=4;w=1'
STATE = '"concurrent_runs";r=0;t=2'


def _assert_refusal_headers(resp) -> None:
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "2"
    assert resp.headers["RateLimit-Policy"] == POLICY
    assert resp.headers["RateLimit"] == STATE


def _names_tenant_and_limit(message: str, tenant: str = "tenant-a", limit: str = "concurrent_runs") -> None:
    assert tenant in message and limit in message


def _key_id(key: str) -> str:
    """docs/limits.md: the first 16 hex digits of the key's SHA-256."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _refuse_a(stack) -> tuple[str, str]:
    """Tenant A refused, tenant B admitted: each one's agent."""
    stack.fake.refused[stack.tenant_a] = DELAY_S
    return stack.fake.add_agent(stack.tenant_a).id, stack.fake.add_agent(stack.tenant_b).id


# Every HTTP door that starts a run: (path, body) for an agent and `stream`.
DOORS = {
    "ragflow": lambda agent, stream: ("/api/v1/agents/chat/completions",
                                      {"agent_id": agent, "query": "hi", "stream": stream}),
    "ragflow legacy": lambda agent, stream: (f"/api/v1/agents/{agent}/completions", {"question": "hi", "stream": stream}),
    "ragflow openai-compatible": lambda agent, stream: (
        "/api/v1/agents/chat/completions", {"agent_id": agent, "openai-compatible": True, "stream": stream,
                                            "messages": [{"role": "user", "content": "hi"}]}),
    "openai": lambda agent, stream: ("/v1/chat/completions", {"model": agent, "stream": stream,
                                                              "messages": [{"role": "user", "content": "hi"}]}),
    "openai agent": lambda agent, stream: (f"/api/v1/agents_openai/{agent}/chat/completions",
                                           {"model": "any", "stream": stream,
                                            "messages": [{"role": "user", "content": "hi"}]}),
    "envelope": lambda agent, stream: (f"/api/v1/agents/{agent}/stream", {"query": "hi"}),
}


def _refusal_body_of(door: str, body: dict) -> str:
    """The door's error shape, checked; its message."""
    if door.startswith("ragflow"):
        assert body == {"code": 400, "message": body["message"], "data": False}  # RAGFlow's rate-limit RetCode
        return body["message"]
    if door.startswith("openai"):
        err = body["error"]
        assert (err["type"], err["code"], err["param"]) == ("rate_limit_error", "rate_limit_exceeded", None)
        return err["message"]
    assert body["type"] == "error"
    data = body["data"]
    assert (data["code"], data["tenant"], data["limit"], data["retry_after"], data["retry_after_ms"]) == (
        "RESOURCE_EXHAUSTED", "tenant-a", "concurrent_runs", 2, 1500)
    return data["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("door", sorted(DOORS))
async def test_a_refused_tenant_gets_429_with_retry_after_in_the_doors_shape_while_another_is_admitted(
        stack, door, stream):
    agent_a, agent_b = _refuse_a(stack)
    path, body = DOORS[door](agent_a, stream)
    resp = await stack.client.post(path, json=body, headers=stack.auth())
    _assert_refusal_headers(resp)
    assert resp.content_type == "application/json"  # a plain answer, not a stream: none had started
    _names_tenant_and_limit(_refusal_body_of(door, await resp.json()))
    assert stack.fake.run_requests[-1].api_key_id == _key_id(stack.key_a)  # the key's own limits apply too

    path, body = DOORS[door](agent_b, stream)
    admitted = await stack.client.post(path, json=body, headers=stack.auth(stack.key_b))
    assert admitted.status == 200 and "Retry-After" not in admitted.headers
    assert "Hello" in await admitted.text()  # the scripted answer, "Hello world"
    assert stack.fake.run_requests[-1].api_key_id == _key_id(stack.key_b)


async def test_the_openai_sdk_raises_rate_limit_error_and_its_retry_honours_retry_after(stack):
    agent_a, _ = _refuse_a(stack)
    async with openai.AsyncOpenAI(api_key=stack.key_a, base_url=stack.url + "/v1", max_retries=0) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(model=agent_a, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 429 and caught.value.code == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "2"
    _names_tenant_and_limit(caught.value.message)

    # The SDK retries a 429 after Retry-After (it reads the header): one more request reaches the orchestrator.
    before = len(stack.fake.run_requests)
    async with openai.AsyncOpenAI(api_key=stack.key_a, base_url=stack.url + "/v1", max_retries=1) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model=agent_a, messages=[{"role": "user", "content": "hi"}])
    assert len(stack.fake.run_requests) - before == 2


async def test_a_refusal_reaching_an_open_stream_is_each_dialects_error_event(stack):
    agent = stack.fake.add_agent(stack.tenant_a).id
    ragflow = await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                                      json={"agent_id": agent, "query": "refuse_late", "stream": True})
    assert ragflow.status == 200  # sent with the stream's first frame
    frames = [json.loads(f[len("data:"):]) for f in (await ragflow.text()).split("\n\n") if f.startswith("data:{")]
    error = frames[-1]
    assert error["code"] == 400 and error["data"] is False
    _names_tenant_and_limit(error["message"], limit="llm_tokens_per_minute")

    openai_stream = await stack.client.post("/v1/chat/completions", headers=stack.auth(), json={
        "model": agent, "stream": True, "messages": [{"role": "user", "content": "refuse_late"}]})
    chunks = [json.loads(f[len("data: "):]) for f in (await openai_stream.text()).split("\n\n")
              if f.startswith("data: {")]
    assert chunks[-1]["error"]["type"] == "rate_limit_error" and chunks[-1]["error"]["code"] == "rate_limit_exceeded"

    envelope = await stack.client.post(f"/api/v1/agents/{agent}/stream", headers=stack.auth(),
                                       json={"query": "refuse_late"})
    events = [json.loads(f[len("data: "):]) for f in (await envelope.text()).split("\n\n") if f.startswith("data: ")]
    [error] = [e for e in events if e["type"] == "error"]
    assert (error["data"]["code"], error["data"]["limit"], error["data"]["retry_after"]) == (
        "RESOURCE_EXHAUSTED", "llm_tokens_per_minute", 3)
    assert events[-1]["type"] == "done"


WEBHOOK_DSL = {"components": {"begin": {"obj": {"component_name": "Begin", "params": {
    "mode": "Webhook", "methods": ["POST"], "content_types": "application/json", "security": {"auth_type": "none", "allow_anonymous": True},
    "execution_mode": "Wait"}}}}}


@pytest.mark.parametrize("mode", ["Wait", "Immediately"])
async def test_the_webhook_trigger_answers_a_refusal_with_429_and_retry_after(stack, mode):
    stack.fake.refused[stack.tenant_a] = DELAY_S
    dsl = json.loads(json.dumps(WEBHOOK_DSL))
    dsl["components"]["begin"]["obj"]["params"]["execution_mode"] = mode
    agent = stack.fake.add_agent(stack.tenant_a, dsl=dsl).id
    resp = await stack.client.post(f"/api/v1/agents/{agent}/webhook", json={"name": "Ann"})  # no key: its own
    _assert_refusal_headers(resp)
    body = await resp.json()
    assert body["code"] == 400
    _names_tenant_and_limit(body["message"])
    assert stack.fake.run_requests[-1].api_key_id == ""  # the public webhook has no key


async def test_the_mcp_tool_call_is_a_jsonrpc_error_with_the_retry_delay(stack):
    agent_a, _ = _refuse_a(stack)
    async with httpx.AsyncClient(headers=stack.auth(), timeout=60) as http, \
            streamable_http_client(f"{stack.url}/api/v1/agents/{agent_a}/mcp", http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        [tool] = (await session.list_tools()).tools
        with pytest.raises(McpError) as caught:
            await session.call_tool(tool.name, {"query": "hi"})
    error = caught.value.error
    assert error.code == JSONRPC_REFUSED
    _names_tenant_and_limit(error.message)
    assert error.data == {"tenant": "tenant-a", "limit": "concurrent_runs", "retry_after": 2, "retry_after_ms": 1500,
                          "ratelimit_policy": POLICY, "ratelimit": STATE}
    assert stack.fake.run_requests[-1].api_key_id == _key_id(stack.key_a)


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
async def test_the_a2a_send_is_a_jsonrpc_error_with_retry_info(stack, method):
    agent_a, agent_b = _refuse_a(stack)
    message = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    call = {"jsonrpc": "2.0", "id": 7, "method": method, "params": message}
    headers = {**stack.auth(), "A2A-Version": "1.0"}
    resp = await stack.client.post(f"/a2a/{agent_a}", json=call, headers=headers)
    assert resp.status == 200 and resp.headers["Retry-After"] == "2"  # JSON-RPC: the error is in the body
    body = await resp.json()
    assert body["id"] == 7
    error = body["error"]
    assert error["code"] == JSONRPC_REFUSED
    _names_tenant_and_limit(error["message"])
    details = {d["@type"].rsplit(".", 1)[-1]: d for d in error["data"]}
    assert details["RetryInfo"]["retryDelay"] == "1.500s"
    assert details["QuotaFailure"]["violations"] == [{"subject": "tenant:tenant-a", "description": "concurrent_runs"}]
    assert details["ErrorInfo"]["reason"] == "RESOURCE_EXHAUSTED"
    assert stack.fake.run_requests[-1].api_key_id == _key_id(stack.key_a)

    admitted = await stack.client.post(f"/a2a/{agent_b}", json=call, headers={**stack.auth(stack.key_b),
                                                                            "A2A-Version": "1.0"})
    assert admitted.status == 200 and "error" not in (await admitted.text())[:200]


async def test_refusals_are_counted_by_tenant_in_the_metrics(stack):
    agent_a, _ = _refuse_a(stack)

    async def refused_total() -> float:
        text = await (await stack.client.get("/metrics")).text()
        return sum(s.value for f in text_string_to_metric_families(text) if f.name == "trellis_gateway_refusals"
                   for s in f.samples if s.name.endswith("_total") and s.labels["tenant"] == stack.tenant_a
                   and s.labels["limit"] == "concurrent_runs" and s.labels["door"] == "openai")

    before = await refused_total()
    for _ in range(2):
        await stack.client.post("/v1/chat/completions", headers=stack.auth(),
                                json={"model": agent_a, "messages": [{"role": "user", "content": "hi"}]})
    assert await refused_total() == before + 2


async def test_without_the_orchestrators_figures_the_admission_route_gives_the_gateways_refusals_by_limit(stack):
    agent_a, agent_b = _refuse_a(stack)

    async def figures(key: str) -> dict:
        body = await (await stack.client.get("/api/v1/tenant/admission", headers=stack.auth(key))).json()
        assert body["code"] == 0
        return body["data"]

    before_a, before_b = await figures(stack.key_a), await figures(stack.key_b)
    await stack.client.post(f"/api/v1/agents/{agent_a}/stream", headers=stack.auth(), json={"query": "hi"})
    await stack.client.post("/v1/chat/completions", headers=stack.auth(),
                            json={"model": agent_a, "messages": [{"role": "user", "content": "hi"}]})
    await stack.client.post(f"/api/v1/agents/{agent_b}/stream", headers=stack.auth(stack.key_b), json={"query": "hi"})
    after_a, after_b = await figures(stack.key_a), await figures(stack.key_b)
    assert (after_a["tenant"], after_b["tenant"]) == (stack.tenant_a, stack.tenant_b)
    # counters of the process (other tests' refusals may be in them): these requests' part
    assert after_a["refused"] - before_a["refused"] == 2 == (
        after_a["refused_by_limit"]["concurrent_runs"] - before_a["refused_by_limit"].get("concurrent_runs", 0))
    assert after_a["refused"] == sum(after_a["refused_by_limit"].values())
    assert after_b["refused"] == before_b["refused"]  # B was admitted
    # The scripted orchestrator serves no GetTenantAdmission: the route falls back on this gateway's own counts
    # (the real orchestrator's figures: tests/gateway/test_refusals_e2e.py)
    assert (after_a["source"], after_b["source"]) == ("gateway", "gateway")
    assert (after_a["admitted"], after_a["waiting"], after_a["running"], after_a["tokens"], after_a["limits"]) == (
        None, None, None, None, None)


async def test_the_openapi_document_describes_the_refusal_of_every_route_that_starts_a_run(stack):
    document = await (await stack.client.get("/openapi.json")).json()
    for path in ("/api/v1/agents/chat/completions", "/v1/chat/completions", "/api/v1/agents/{agent_id}/stream"):
        refused = document["paths"][path]["post"]["responses"]["429"]
        assert set(refused["headers"]) == {"Retry-After", "RateLimit-Policy", "RateLimit"}, path
    assert "429" not in document["paths"]["/api/v1/agents"]["get"]["responses"]
