"""RAGFlow's webhook trigger over the real stack: each security mode, schema errors naming the field,
`Immediately` answering while the run goes on (held at a gate) and shows on the run API, waiting for the
result, the test route and its logs. Messages and codes are RAGFlow's (api/apps/restful_apis/agent_api.py)."""

from __future__ import annotations

import aiohttp
import jwt
import pytest

from tests.support.agent_services import cpn
from tests.support.trigger_stack import gated_canvas, trigger_stack

JSON = "application/json"
SCHEMA = {
    "query": {"properties": {"page": {"type": "number"}}, "required": []},
    "headers": {"properties": {"X-Event": {"type": "string"}}, "required": ["X-Event"]},
    "body": {"properties": {"name": {"type": "string"}, "tags": {"type": "array<string>"},
                            "urgent": {"type": "boolean"}}, "required": ["name"]},
}
SECRET = "a-shared-secret-of-at-least-32-bytes"
ANON = {"auth_type": "none", "allow_anonymous": True}


def hook(security: dict | None = None, **params) -> dict:
    """Begin in Webhook mode -> Message echoing what Begin outputs."""
    begin = {"mode": "Webhook", "methods": ["POST"], "content_types": JSON, "schema": SCHEMA,
             "execution_mode": "Wait", **params}
    if security is not None:
        begin["security"] = security
    return {"components": {
        "begin": cpn("Begin", ["Message:Out"], begin),
        "Message:Out": cpn("Message", [], {"content": [
            "name={begin@body.name} page={begin@query.page} event={begin@headers.X-Event} tags={begin@body.tags}"]},
            ("begin",)),
    }}


@pytest.fixture
async def s(redis_server):
    async with trigger_stack(redis_server.url) as stack:
        yield stack


async def post(s, agent_id: str, *, path: str = "webhook", json: dict | None = None, headers: dict | None = None,
               **kw) -> tuple[int, dict]:
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/{path}", json={"name": "Ann"} if json is None else json,
                               headers={"X-Event": "push", **(headers or {})}, **kw)
    return resp.status, await resp.json()


def refused(message: str) -> tuple[int, dict]:
    return 400, {"code": 400, "message": message}


async def test_anonymous_webhook_waits_and_answers_the_run_with_the_payload_in_begin(s):
    agent_id = await s.create(hook(ANON))
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/webhook?page=2", json={"name": "Ann", "tags": ["a"]},
                               headers={"X-Event": "push"})  # no API key: the webhook has its own security
    assert resp.status == 200
    assert await resp.json() == {"message": 'name=Ann page=2 event=push tags=["a"]', "success": True, "code": 200}
    run = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{resp.headers['X-Run-Id']}")
    assert run["data"]["status"] == "succeeded"


async def test_security_is_required_and_anonymous_access_must_be_allowed(s):
    assert await post(s, await s.create(hook())) == refused(
        "Webhook security is required. Set allow_anonymous to true to permit unauthenticated webhooks.")
    assert await post(s, await s.create(hook({"auth_type": "none"}))) == refused(
        "Anonymous webhook access requires allow_anonymous to be true")
    assert await post(s, await s.create(hook({"auth_type": "magic"}))) == refused("Unsupported auth_type: magic")


async def test_token_auth(s):
    agent_id = await s.create(hook({"auth_type": "token", "token": {"token_header": "X-Token", "token_value": "t0k"}}))
    assert await post(s, agent_id, headers={"X-Token": "nope"}) == refused("Invalid token authentication")
    assert await post(s, agent_id) == refused("Invalid token authentication")
    status, body = await post(s, agent_id, headers={"X-Token": "t0k"})
    assert (status, body["success"]) == (200, True)


async def test_basic_auth(s):
    agent_id = await s.create(hook({"auth_type": "basic", "basic_auth": {"username": "u", "password": "p"}}))
    assert await post(s, agent_id, headers={"Authorization": aiohttp.encode_basic_auth("u", "wrong")}) == refused("Invalid Basic Auth credentials")
    assert await post(s, agent_id) == refused("Invalid Basic Auth credentials")
    status, body = await post(s, agent_id, headers={"Authorization": aiohttp.encode_basic_auth("u", "p")})
    assert (status, body["success"]) == (200, True)


async def test_jwt_auth(s):
    cfg = {"secret": SECRET, "audience": "trellis", "issuer": "ci", "required_claims": ["role"]}
    agent_id = await s.create(hook({"auth_type": "jwt", "jwt": cfg}))

    def bearer(claims: dict, key: str = SECRET) -> dict:
        return {"Authorization": f"Bearer {jwt.encode(claims, key, algorithm='HS256')}"}

    good = {"aud": "trellis", "iss": "ci", "role": "bot"}
    assert await post(s, agent_id) == refused("Missing Bearer token")
    assert await post(s, agent_id, headers={"Authorization": "Bearer "}) == refused("Missing Bearer token")
    assert await post(s, agent_id, headers=bearer(good, key="another-secret-of-32-bytes-or-more")) == refused(
        "Invalid JWT: Signature verification failed")
    assert await post(s, agent_id, headers=bearer({**good, "aud": "else"})) == refused(
        "Invalid JWT: Audience doesn't match")
    assert await post(s, agent_id, headers=bearer({"aud": "trellis", "iss": "ci"})) == refused("Missing JWT claim: role")
    status, body = await post(s, agent_id, headers=bearer(good))
    assert (status, body["success"]) == (200, True)
    reserved = await s.create(hook({"auth_type": "jwt", "jwt": {"secret": SECRET, "required_claims": ["exp"]}}))
    assert await post(s, reserved, headers=bearer({})) == refused("Reserved JWT claim cannot be required: exp")


async def test_ip_allow_list_rate_limit_and_body_size(s):
    outside = await s.create(hook({**ANON, "ip_whitelist": ["10.0.0.0/8", "192.168.1.1"]}))
    assert await post(s, outside) == refused("IP 127.0.0.1 is not allowed by whitelist")
    inside = await s.create(hook({**ANON, "ip_whitelist": ["10.0.0.0/8", "127.0.0.0/24"]}))
    assert (await post(s, inside))[0] == 200

    limited = await s.create(hook({**ANON, "rate_limit": {"limit": 2, "per": "hour"}}))
    assert [(await post(s, limited))[0] for _ in range(2)] == [200, 200]
    assert await post(s, limited) == refused("Rate limit error: Too many requests (rate limit exceeded)")
    assert await post(s, await s.create(hook({**ANON, "rate_limit": {"limit": 1, "per": "week"}}))) == refused(
        "Invalid rate_limit.per: week")

    small = await s.create(hook({**ANON, "max_body_size": "1kb"}))
    assert await post(s, small, json={"name": "x" * 2000}) == refused("Request body too large: 2012 > 1024")
    assert await post(s, await s.create(hook({**ANON, "max_body_size": "20MB"}))) == refused(
        "max_body_size exceeds maximum allowed size (10MB)")
    assert await post(s, await s.create(hook({**ANON, "max_body_size": "10GB"}))) == refused(
        "Invalid max_body_size format")


async def test_schema_errors_name_the_field(s):
    agent_id = await s.create(hook(ANON))
    assert await post(s, agent_id, json={}) == refused("body missing required field: name")
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/webhook", json={"name": "Ann"})
    assert (resp.status, await resp.json()) == refused("headers missing required field: X-Event")
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/webhook?page=two", json={"name": "Ann"},
                               headers={"X-Event": "push"})
    assert (resp.status, await resp.json()) == refused("query.page auto-cast failed: Cannot convert 'two' to number")
    assert await post(s, agent_id, json={"name": "Ann", "tags": ["a", 1]}) == refused(
        "body.tags type mismatch: expected array<string>, got list")
    assert await post(s, agent_id, json={"name": "Ann", "urgent": "maybe"}) == refused(
        "body.urgent auto-cast failed: Cannot convert 'maybe' to boolean")
    status, body = await post(s, agent_id, json={"name": "Ann", "urgent": "true"})
    assert status == 200


async def test_methods_unknown_agents_and_canvases_without_a_webhook(s):
    agent_id = await s.create(hook(ANON))
    resp = await s.client.get(f"/api/v1/agents/{agent_id}/webhook", headers={"X-Event": "push"})
    assert (resp.status, await resp.json()) == refused("HTTP method 'GET' not allowed for this webhook.")
    assert await post(s, "no-such-agent") == refused("Canvas not found.")
    plain = await s.create({"components": {"begin": cpn("Begin", [])}})
    assert await post(s, plain) == refused("Webhook not configured for this agent.")
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/webhook", data="x", headers={"Content-Type": "text/plain"})
    body = await resp.json()
    assert (resp.status, body["code"]) == (200, 100)
    assert "Invalid Content-Type: expect 'application/json', got 'text/plain'" in body["message"]


async def test_immediately_answers_at_once_while_the_run_goes_on(s):
    begin = {"mode": "Webhook", "methods": ["POST"], "content_types": JSON, "security": ANON,
             "execution_mode": "Immediately", "response": {"status": 201, "body_template": '{"accepted": true}'},
             "schema": {"body": {"properties": {"name": {"type": "string"}}}}}  # only declared fields reach Begin
    agent_id = await s.create(gated_canvas(s.gate.url, begin, content="{begin@body.name}: {Invoke:Gate@result}"))
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/webhook", json={"name": "Ann"})
    assert (resp.status, await resp.json()) == (201, {"accepted": True})
    run_id = resp.headers["X-Run-Id"]
    await s.gate.reached.wait()  # the run is held at the gate: it outlived the answer
    run = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}")
    assert run["data"]["status"] == "running"
    s.gate.opened.set()
    joined = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}/join")
    assert joined["data"]["data"]["content"] == "Ann: gate open"
    assert (await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}"))["data"]["status"] == "succeeded"

    text = await s.create(gated_canvas(s.gate.url, {**begin, "response": {"status": 200, "body_template": "thanks"}}))
    resp = await s.client.post(f"/api/v1/agents/{text}/webhook", json={})
    assert (resp.status, resp.content_type, await resp.text()) == (200, "text/plain", "thanks")
    bad = await s.create(gated_canvas(s.gate.url, {**begin, "response": {"status": 500}}))
    assert await post(s, bad) == refused("Invalid response status code: 500, must be between 200 and 399")


async def test_the_test_route_logs_its_run_for_the_owner(s):
    agent_id = await s.create(hook(ANON))
    status, body = await post(s, agent_id, path="webhook/test", headers=s.auth(s.key_b))
    assert (status, body) == (200, {"code": 103, "data": False,
                                    "message": "Only the owner of the agent is authorized for this operation."})
    empty = await s.call("GET", f"/api/v1/agents/{agent_id}/webhook/logs", params={"since_ts": 0})
    assert (empty["code"], empty["data"]["events"], empty["data"]["finished"]) == (0, [], False)

    status, body = await post(s, agent_id, path="webhook/test", headers=s.auth())
    assert (status, body["message"]) == (200, "name=Ann page=0 event=push tags=[]")
    first = await s.call("GET", f"/api/v1/agents/{agent_id}/webhook/logs", params={"since_ts": 0})
    webhook_id, since = first["data"]["webhook_id"], first["data"]["next_since_ts"]
    assert webhook_id and first["data"]["events"] == [] and since > 0
    logs = await s.call("GET", f"/api/v1/agents/{agent_id}/webhook/logs",
                        params={"since_ts": 0, "webhook_id": webhook_id})
    events = [e["event"] for e in logs["data"]["events"]]
    assert events[0] == "workflow_started" and events[-2:] == ["workflow_finished", "finished"]
    assert "message" in events and logs["data"]["finished"] is True
    assert logs["data"]["events"][-1]["success"] is True
    later = await s.call("GET", f"/api/v1/agents/{agent_id}/webhook/logs",
                         params={"since_ts": logs["data"]["next_since_ts"], "webhook_id": webhook_id})
    assert later["data"]["events"] == [] and later["data"]["finished"] is False

    none = await s.call("GET", f"/api/v1/agents/{agent_id}/webhook/logs")
    assert none["data"]["webhook_id"] is None and none["data"]["events"] == []
    other = await s.call("GET", f"/api/v1/agents/{agent_id}/webhook/logs", key=s.key_b, params={"since_ts": 0})
    assert other == {"code": 102, "message": "Canvas not found."}
