"""A new dialect is one module plus one route registration: tests/support/ndjson_dialect.py implements the
`Dialect` interface without touching a gateway file, and this test registers its route on the real app."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from tests.support import ndjson_dialect


@pytest.fixture
async def client(stack):
    app = create_app(stack.config())
    ndjson_dialect.add_routes(app)  # the one registration
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()


def _path(agent_id: str) -> str:
    return ndjson_dialect.PATH.format(agent_id=agent_id)


async def test_it_streams_a_run(client, stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await client.post(_path(agent.id), json={"query": "think"}, headers=stack.auth())
    assert resp.status == 200 and resp.content_type == "application/x-ndjson"
    lines = [json.loads(x) for x in (await resp.read()).decode().splitlines()]
    assert [x["kind"] for x in lines[:2]] == ["run_started", "node_started"]
    assert "".join(x["text"] for x in lines if x["kind"] == "text") == "<think>pondering</think>Hello world"
    assert lines[-2]["kind"] == "run_finished" and lines[-1] == {"kind": "end"}
    assert stack.fake.run_requests[-1].query == "think" and stack.fake.run_requests[-1].tenant_id == stack.tenant_a


async def test_a_failure_mid_run_is_a_line_then_the_end(client, stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await client.post(_path(agent.id), json={"query": "explode"}, headers=stack.auth())
    lines = [json.loads(x) for x in (await resp.read()).decode().splitlines()]
    assert lines[-2] == {"kind": "error", "message": "LLM provider failed: boom (component Agent:A)", "code": "INTERNAL"}
    assert lines[-1] == {"kind": "end"}


async def test_one_answer_without_stream(client, stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await client.post(_path(agent.id), json={"query": "hi", "stream": False}, headers=stack.auth())
    assert resp.status == 200 and (await resp.json())["answer"] == "Hello world"


async def test_errors_before_the_run_are_in_its_shape(client, stack):
    no_key = await client.post(_path("x"), json={"query": "hi"})
    assert no_key.status == 401 and (await no_key.json())["code"] == "UNAUTHENTICATED"
    unknown = await client.post(_path("nope"), json={"query": "hi"}, headers=stack.auth())
    assert unknown.status == 404 and set(await unknown.json()) == {"error", "code"}
    bad = await client.post(_path("x"), json={"stream": "maybe"}, headers=stack.auth())
    body = await bad.json()
    assert bad.status == 400 and body["code"] == "INVALID_ARGUMENT" and "stream" in body["error"]


async def test_the_openapi_document_describes_it(client, stack):
    document = await (await client.get("/openapi.json")).json()
    op = document["paths"][_path("{agent_id}")]["post"]
    assert "application/x-ndjson" in op["responses"]["200"]["content"]
    error = op["responses"]["default"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/NdjsonError"}
    assert set(document["components"]["schemas"]["NdjsonError"]["properties"]) == {"error", "code"}
