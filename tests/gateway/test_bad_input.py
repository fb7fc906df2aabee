"""Bad input gets a clear error in the dialect of its path, never a 500 with a trace."""

from __future__ import annotations

import pytest

RAGFLOW, OPENAI, ENVELOPE = "ragflow", "openai", "envelope"


async def _error(stack, dialect: str, resp) -> tuple[int, str]:
    """(the status the client sees, the error message), checking the dialect's error shape."""
    body = await resp.json()
    if dialect == RAGFLOW:
        assert resp.status == 200 and set(body) == {"code", "message", "data"} and body["data"] is False, body
        return body["code"], body["message"]
    if dialect == OPENAI:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        return resp.status, body["error"]["message"]
    assert body["type"] == "error" and set(body) == {"type", "node_name", "run_id", "timestamp", "thread_id", "data"}
    return resp.status, body["data"]["message"]


def _paths(agent_id: str) -> list[tuple[str, str]]:
    return [(RAGFLOW, "/api/v1/agents/chat/completions"), (RAGFLOW, f"/api/v1/agents/{agent_id}/completions"),
            (RAGFLOW, "/api/v1/agents"), (OPENAI, "/v1/chat/completions"),
            (OPENAI, f"/api/v1/agents_openai/{agent_id}/chat/completions"), (ENVELOPE, f"/api/v1/agents/{agent_id}/stream")]


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", "\"caf\xe9\"".encode("latin-1")])
async def test_malformed_json(stack, raw):
    agent = stack.fake.add_agent(stack.tenant_a)
    for dialect, path in _paths(agent.id):
        resp = await stack.client.post(path, data=raw, headers={**stack.auth(), "Content-Type": "application/json"})
        code, message = await _error(stack, dialect, resp)
        assert code in (101, 400), (path, code)
        assert message.startswith("request body "), message


async def test_oversized_body_is_413_or_its_ragflow_code(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    big = b'{"query": "' + b"x" * (70 * 1024) + b'"}'
    for dialect, path in _paths(agent.id):
        resp = await stack.client.post(path, data=big, headers={**stack.auth(), "Content-Type": "application/json"})
        code, message = await _error(stack, dialect, resp)
        assert code == (101 if dialect == RAGFLOW else 413)
        assert "too large" in message and "65536" in message
    assert not stack.fake.run_requests


async def test_missing_and_mistyped_fields_name_the_field(stack):
    c, h = stack.client, stack.auth()
    agent = stack.fake.add_agent(stack.tenant_a)
    cases = [
        (RAGFLOW, "/api/v1/agents", {"dsl": {}}, "No title in request."),  # RAGFlow's messages
        (RAGFLOW, "/api/v1/agents", {"title": "x"}, "No DSL data in request."),
        (RAGFLOW, "/api/v1/agents", {"title": "x", "dsl": "[1]"}, "`dsl` must be a JSON object"),
        (RAGFLOW, "/api/v1/agents/chat/completions", {"query": "hi"}, "`agent_id` is required."),
        (RAGFLOW, "/api/v1/agents/chat/completions", {"agent_id": agent.id, "inputs": [1]}, "`inputs`"),
        (RAGFLOW, "/api/v1/agents/chat/completions",
         {"agent_id": agent.id, "files": [{"content": "!!"}]}, "`files.0.content` is not base64"),
        (OPENAI, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "`model` is required"),
        (OPENAI, "/v1/chat/completions", {"model": agent.id}, "`messages` is required"),
        (OPENAI, "/v1/chat/completions", {"model": agent.id, "messages": []}, "`messages`"),
        (OPENAI, "/v1/chat/completions", {"model": agent.id, "messages": [{"content": "x"}]}, "`messages.0.role` is required"),
        (ENVELOPE, f"/api/v1/agents/{agent.id}/stream", {"query": ["x"]}, "`query`"),
    ]
    for dialect, path, body, expected in cases:
        code, message = await _error(stack, dialect, await c.post(path, json=body, headers=h))
        assert code in (101, 400), (path, body, code)
        assert expected in message, (path, message)
    # RAGFlow: a page that is not a positive integer is page 1; a page_size above 100 is refused.
    assert (await (await c.get("/api/v1/agents", params={"page": "two"}, headers=h)).json())["code"] == 0
    assert (await _error(stack, RAGFLOW, await c.get("/api/v1/agents", params={"page_size": 101}, headers=h))) == \
        (101, "page_size must be less than or equal to 100")
    assert not stack.fake.run_requests


async def test_unknown_agent_and_session_in_every_dialect(stack):
    c, h = stack.client, stack.auth()
    agent = stack.fake.add_agent(stack.tenant_a)
    cases = [
        (RAGFLOW, c.post("/api/v1/agents/nope/completions", json={"question": "hi"}, headers=h), 102),
        (RAGFLOW, c.post("/api/v1/agents/chat/completions", json={"agent_id": agent.id, "session_id": "nope"}, headers=h), 102),
        (RAGFLOW, c.get(f"/api/v1/agents/{agent.id}/sessions/nope", headers=h), 102),
        (OPENAI, c.post("/v1/chat/completions", json={"model": "nope", "stream": True,
                                                      "messages": [{"role": "user", "content": "hi"}]}, headers=h), 404),
        (ENVELOPE, c.post("/api/v1/agents/nope/stream", json={"query": "hi"}, headers=h), 404),
        (ENVELOPE, c.post(f"/api/v1/agents/{agent.id}/stream", json={"query": "hi", "thread_id": "nope"}, headers=h), 404),
    ]
    for dialect, request, expected in cases:
        code, message = await _error(stack, dialect, await request)
        assert code == expected and "not found" in message.lower(), (dialect, code, message)
    # RAGFlow's own words: 102 "canvas not found." on get, 103 for everything else about an unknown agent.
    assert await _error(stack, RAGFLOW, await c.get("/api/v1/agents/nope", headers=h)) == (102, "canvas not found.")
    no_access = (103, "Make sure you have permission to access the agent.")
    assert await _error(stack, RAGFLOW, await c.post("/api/v1/agents/nope/sessions", headers=h)) == no_access
    for stream in (True, False):
        run = await c.post("/api/v1/agents/chat/completions", json={"agent_id": "nope", "query": "hi", "stream": stream}, headers=h)
        assert await _error(stack, RAGFLOW, run) == no_access
    assert await _error(stack, RAGFLOW, await c.put("/api/v1/agents/nope", json={"title": "t"}, headers=h)) == no_access
    assert await _error(stack, RAGFLOW, await c.delete("/api/v1/agents/nope", headers=h)) == \
        (103, "Only the owner of the agent is authorized for this operation.")


async def test_invalid_dsl_at_run_time_is_reported_before_the_stream(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    message = "canvas is not valid: component Agent:A: field `llm_id` is required"
    resp = await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                                   json={"agent_id": agent.id, "query": "invalid", "stream": True})
    assert await _error(stack, RAGFLOW, resp) == (101, message)
    resp = await stack.client.post("/v1/chat/completions", headers=stack.auth(),
                                   json={"model": agent.id, "stream": True, "messages": [{"role": "user", "content": "invalid"}]})
    assert await _error(stack, OPENAI, resp) == (400, message)
    resp = await stack.client.post(f"/api/v1/agents/{agent.id}/stream", headers=stack.auth(), json={"query": "invalid"})
    assert await _error(stack, ENVELOPE, resp) == (400, message)


async def test_orchestrator_down_is_503_not_a_trace(stack):
    from aiohttp.test_utils import TestClient, TestServer
    from tests.support.net import free_port

    from gateway.app import create_app

    cfg = stack.config()
    cfg.upstreams["orchestrator"] = f"127.0.0.1:{free_port()}"
    client = TestClient(TestServer(create_app(stack.config(upstreams=cfg.upstreams, rpc_timeout_s=2, run_timeout_s=2))))
    await client.start_server()
    try:
        ragflow = await client.get("/api/v1/agents", headers=stack.auth())
        oai = await client.post("/v1/chat/completions", headers=stack.auth(),
                                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert await _error(stack, RAGFLOW, ragflow) == (105, "the orchestrator is unavailable; try again shortly")
        assert (await _error(stack, OPENAI, oai))[0] == 503
    finally:
        await client.close()


async def test_a_bug_in_a_handler_is_a_clean_error_in_each_dialect(stack, caplog):
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from gateway.auth import KeyRing
    from gateway.endpoint import KEYS, Dialect, endpoint

    app = web.Application()
    app[KEYS] = KeyRing({stack.key_a: stack.tenant_a})
    dialects = (Dialect.RAGFLOW, Dialect.OPENAI, Dialect.ENVELOPE)
    for dialect in dialects:
        @endpoint(dialect)
        async def broken(request):
            raise KeyError("secret internals")

        app.router.add_get(f"/{dialect.name}", broken)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        for dialect in dialects:
            resp = await client.get(f"/{dialect.name}", headers=stack.auth())
            code, message = await _error(stack, dialect.name, resp)
            assert code == 500 and message == "internal error in the gateway; see its log"
            assert "secret" not in await resp.text()
    finally:
        await client.close()
    assert "secret internals" in caplog.text  # logged once, with its trace, for the operator


async def test_unknown_paths_get_a_404_in_their_dialect(stack):
    # RAGFlow's own 404, key or no key: HTTP 404 with {code: 404, error, message}.
    for headers in (stack.auth(), {}):
        ragflow = await stack.client.get("/api/v1/no/such/thing", headers=headers)
        assert ragflow.status == 404 and await ragflow.json() == {
            "code": 404, "error": "Not Found", "message": "Not Found: /api/v1/no/such/thing"}
    # A path with an empty segment is read with its slashes merged (a 308 to it); one served for other
    # methods only is RAGFlow's 405, code 100.
    merged = await stack.client.get("/api/v1/datasets//documents", headers=stack.auth(), allow_redirects=False)
    assert merged.status == 308 and merged.headers["Location"] == "/api/v1/datasets/documents"
    wrong_method = await stack.client.patch("/api/v1/datasets", headers=stack.auth())
    assert (await wrong_method.json())["code"] == 100
    oai = await stack.client.post("/v1/embeddings", json={}, headers=stack.auth())
    assert await _error(stack, OPENAI, oai) == (404, "no such endpoint: POST /v1/embeddings")
    assert (await stack.client.get("/healthz")).status in (200, 503)  # untouched
