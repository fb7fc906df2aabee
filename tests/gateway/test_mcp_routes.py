"""RAGFlow's /api/v1/mcp/servers routes through the real gateway and the real orchestrator (Redis-backed),
against a real FastMCP server; then an agent whose Agent uses the saved server answers over HTTP."""

from __future__ import annotations

import asyncio
import json
import uuid

import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from services.orchestrator.engine.settings import EngineSettings
from tests.support.llm_gateway import llm_gateway
from tests.support.mcp_server import serving
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator

KEY_A, KEY_B = "mcp-key-a", "mcp-key-b"
SCRIPTS = {"chat": {"helper": [{"tool_calls": [{"name": "add_0", "arguments": {"a": 19, "b": 23}}]},
                               "The answer is {last_tool}."],
                    "caller": [{"tool_calls": [{"name": "whoami_0", "arguments": {}}]}, "Sent: {last_tool}."]}}


@pytest.fixture
async def gateway(redis_server, stack):
    """Gateway -> orchestrator (loopback allowed past the SSRF guard) -> scripted llm_gateway."""
    engine = EngineSettings(ssrf_allowlist=("127.0.0.1",), mcp_timeout_s=5.0)
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_server.url, llm_gateway_addr=llm.addr,
                                                          engine=engine) as orch:
        run = uuid.uuid4().hex[:8]  # the test Redis lives for the whole session: fresh tenants per test
        gw_cfg = stack.config(api_keys={KEY_A: f"mcp-a-{run}", KEY_B: f"mcp-b-{run}"},
                              upstreams={**stack.config().upstreams, "orchestrator": orch.addr})
        client = TestClient(TestServer(create_app(gw_cfg)))
        await client.start_server()
        yield client
        await client.close()


def _h(key: str = KEY_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def call(client: TestClient, method: str, path: str, key: str = KEY_A, **kw) -> dict:
    resp = await client.request(method, path, headers=_h(key), **kw)
    assert resp.status == 200
    return await resp.json()


async def test_create_list_get_update_test_delete(gateway):
    async with serving(token="tok-1") as mcp:
        created = await call(gateway, "POST", "/api/v1/mcp/servers", json={
            "name": "calc", "url": mcp + "/mcp", "server_type": "streamable-http", "description": "adds",
            "headers": {"Authorization": "Bearer ${authorization_token}"},
            "variables": '{"authorization_token": "tok-1", "tools": {"stale": {}}}', "timeout": 4})
        assert created["code"] == 0, created
        server = created["data"]
        mcp_id = server["id"]
        assert len(mcp_id) == 32 and server["name"] == "calc" and server["timeout"] == 4
        assert set(server["variables"]["tools"]) == {"add", "shout", "nap", "broken", "whoami"}  # "stale" replaced
        assert server["variables"]["authorization_token"] == "tok-1"

        listed = await call(gateway, "GET", "/api/v1/mcp/servers?keywords=CAL")
        assert listed["data"]["total"] == 1 and [s["id"] for s in listed["data"]["mcp_servers"]] == [mcp_id]
        assert (await call(gateway, "GET", "/api/v1/mcp/servers?keywords=zzz"))["data"] == {"mcp_servers": [], "total": 0}
        assert (await call(gateway, "GET", f"/api/v1/mcp/servers?mcp_ids={mcp_id},other"))["data"]["total"] == 1

        got = await call(gateway, "GET", f"/api/v1/mcp/servers/{mcp_id}")
        assert got["data"]["url"] == mcp + "/mcp" and got["data"]["headers"] == server["headers"]
        exported = (await call(gateway, "GET", f"/api/v1/mcp/servers/{mcp_id}?mode=download"))["data"]
        assert exported["mcpServers"]["calc"]["authorization_token"] == "tok-1"
        assert exported["mcpServers"]["calc"]["type"] == "streamable-http"

        updated = await call(gateway, "PUT", f"/api/v1/mcp/servers/{mcp_id}",
                             json={"name": "calculator", "url": mcp + "/sse", "server_type": "sse"})
        assert updated["code"] == 0, updated
        assert (updated["data"]["name"], updated["data"]["server_type"]) == ("calculator", "sse")
        assert "add" in updated["data"]["variables"]["tools"] and updated["data"]["timeout"] == 4

        tested = await call(gateway, "POST", f"/api/v1/mcp/servers/{mcp_id}/test", json={
            "url": mcp + "/mcp", "server_type": "streamable-http", "headers": {"Authorization": "Bearer tok-1"}})
        assert {t["name"] for t in tested["data"]} == {"add", "shout", "nap", "broken", "whoami"}
        assert all(t["enabled"] is True and "inputSchema" in t for t in tested["data"])

    assert (await call(gateway, "DELETE", f"/api/v1/mcp/servers/{mcp_id}")) == {"code": 0, "message": "success",
                                                                                  "data": True}
    gone = await call(gateway, "GET", f"/api/v1/mcp/servers/{mcp_id}")
    assert gone["code"] == 102 and gone["message"].startswith(f"Cannot find MCP server {mcp_id}")


async def test_refusals_use_ragflows_codes_and_say_why(gateway):
    async with serving(token="tok-1") as mcp:
        ok = {"name": "calc", "url": mcp + "/mcp", "server_type": "streamable-http",
              "headers": {"Authorization": "Bearer tok-1"}}
        missing = await call(gateway, "POST", "/api/v1/mcp/servers", json={"name": "x"})
        assert (missing["code"], missing["message"]) == (101, "required argument are missing: url,server_type; ")
        bad_type = await call(gateway, "POST", "/api/v1/mcp/servers", json={**ok, "server_type": "stdio"})
        assert (bad_type["code"], bad_type["message"]) == (102, "Unsupported MCP server type.")
        unauthorized = await call(gateway, "POST", "/api/v1/mcp/servers", json={**ok, "headers": {}})
        assert unauthorized["code"] == 102 and "answered HTTP 401 Unauthorized" in unauthorized["message"]
        assert (await call(gateway, "POST", "/api/v1/mcp/servers", json=ok))["code"] == 0
        dup = await call(gateway, "POST", "/api/v1/mcp/servers", json=ok)
        assert (dup["code"], dup["message"]) == (102, "Duplicated MCP server name.")
    down = await call(gateway, "POST", "/api/v1/mcp/servers",
                      json={**ok, "name": "down", "url": f"http://127.0.0.1:{free_port()}/mcp"})
    assert down["code"] == 102 and "MCP server 'down'" in down["message"] and "cannot connect" in down["message"]
    test_down = await call(gateway, "POST", "/api/v1/mcp/servers/x/test",
                           json={"url": f"http://127.0.0.1:{free_port()}/sse", "server_type": "sse"})
    assert test_down["code"] == 102 and test_down["message"].startswith("Test MCP error: ")
    bad_json = await call(gateway, "POST", "/api/v1/mcp/servers", json={**ok, "name": "j", "headers": "{nope"})
    assert bad_json["code"] == 101 and bad_json["message"] == "`headers` is not valid JSON"
    listed = await call(gateway, "GET", "/api/v1/mcp/servers")
    assert [s["name"] for s in listed["data"]["mcp_servers"]] == ["calc"]  # nothing else was saved


async def test_a_server_that_never_answers_is_refused_after_the_requests_timeout(gateway):
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, reads, never answers

    silent = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        created = await call(gateway, "POST", "/api/v1/mcp/servers", json={
            "name": "mute", "url": f"http://127.0.0.1:{port}/mcp", "server_type": "streamable-http", "timeout": 0.5})
        tested = await call(gateway, "POST", "/api/v1/mcp/servers/x/test", json={
            "url": f"http://127.0.0.1:{port}/sse", "server_type": "sse", "timeout": 0.5})
    finally:
        silent.close()
    assert created["code"] == 102 and created["message"].endswith("could not list its tools: no answer within 0.5 s")
    assert tested["code"] == 102 and "no answer within 0.5 s" in tested["message"]


async def test_import_renames_duplicates_and_reports_each_server(gateway):
    async with serving(token="tok-1") as mcp:
        body = {"mcpServers": {
            "calc": {"type": "streamable-http", "url": mcp + "/mcp", "authorization_token": "tok-1"},
            "noauth": {"type": "sse", "url": mcp + "/sse"},
            "broken": {"url": mcp + "/mcp"}}}
        first = (await call(gateway, "POST", "/api/v1/mcp/servers/import", json=body))["data"]["results"]
        again = (await call(gateway, "POST", "/api/v1/mcp/servers/import",
                            json={"mcpServers": {"calc": body["mcpServers"]["calc"]}}))["data"]["results"]
    assert first[0]["success"] is True and first[0]["action"] == "created" and first[0]["new_name"] == "calc"
    assert first[1]["success"] is False and "401" in first[1]["message"]
    assert first[2] == {"server": "broken", "success": False, "message": "Missing required fields (type or url)"}
    assert again[0]["new_name"] == "calc_0"
    assert again[0]["message"] == "Renamed from 'calc' to 'calc_0' avoid duplication"
    saved = (await call(gateway, "GET", f"/api/v1/mcp/servers/{again[0]['id']}"))["data"]
    assert saved["headers"] == {"Authorization": "Bearer ${authorization_token}"} and "add" in saved["variables"]["tools"]
    empty = await call(gateway, "POST", "/api/v1/mcp/servers/import", json={"mcpServers": {}})
    assert (empty["code"], empty["message"]) == (102, "No MCP servers provided.")


async def test_tenants_see_only_their_own_servers(gateway):
    async with serving() as mcp:
        created = await call(gateway, "POST", "/api/v1/mcp/servers",
                             json={"name": "mine", "url": mcp + "/mcp", "server_type": "streamable-http"})
    mcp_id = created["data"]["id"]
    assert (await call(gateway, "GET", "/api/v1/mcp/servers", key=KEY_B))["data"]["total"] == 0
    assert (await call(gateway, "GET", f"/api/v1/mcp/servers/{mcp_id}", key=KEY_B))["code"] == 102
    assert (await call(gateway, "DELETE", f"/api/v1/mcp/servers/{mcp_id}", key=KEY_B))["code"] == 102
    assert (await call(gateway, "GET", f"/api/v1/mcp/servers/{mcp_id}"))["code"] == 0


def _agent_dsl(model: str, mcp_id: str, tools: dict) -> dict:
    return {"components": {
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Agent:a"], "upstream": []},
        "Agent:a": {"obj": {"component_name": "Agent", "params": {
            "llm_id": model, "sys_prompt": "Use tools.", "prompts": [{"role": "user", "content": "{sys.query}"}],
            "mcp": [{"mcp_id": mcp_id, "tools": tools}]}},
            "downstream": ["Message:m"], "upstream": ["begin"]},
        "Message:m": {"obj": {"component_name": "Message", "params": {"content": ["{Agent:a@content}"]}},
                      "downstream": [], "upstream": ["Agent:a"]}}}


async def test_the_requests_custom_header_reaches_the_mcp_server(gateway):
    async with serving() as mcp:
        server = (await call(gateway, "POST", "/api/v1/mcp/servers", json={
            "name": "echo", "url": mcp + "/sse", "server_type": "sse"}))["data"]
        dsl = _agent_dsl("caller@Scripted", server["id"], {"whoami": server["variables"]["tools"]["whoami"]})
        agent_id = (await call(gateway, "POST", "/api/v1/agents", json={"title": "Caller", "dsl": dsl}))["data"]["id"]
        done = await call(gateway, "POST", "/api/v1/agents/chat/completions", json={
            "agent_id": agent_id, "query": "who?", "stream": False,
            "custom_header": {"Authorization": "Bearer from-request"}})
    assert done["code"] == 0, done
    assert "Sent: Bearer from-request." in json.dumps(done["data"])


async def test_an_agent_answers_with_a_saved_servers_tool(gateway):
    async with serving(token="tok-1") as mcp:
        server = (await call(gateway, "POST", "/api/v1/mcp/servers", json={
            "name": "calc", "url": mcp + "/mcp", "server_type": "streamable-http",
            "headers": {"Authorization": "Bearer tok-1"}}))["data"]
        dsl = _agent_dsl("helper@Scripted", server["id"], {"add": server["variables"]["tools"]["add"]})
        created = await call(gateway, "POST", "/api/v1/agents", json={"title": "Adder", "dsl": dsl})
        assert created["code"] == 0, created
        base = str(gateway.server.make_url("")).rstrip("/") + "/v1"
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=base, max_retries=0) as client:
            done = await client.chat.completions.create(model=created["data"]["id"],
                                                        messages=[{"role": "user", "content": "19 + 23?"}])
    assert done.choices[0].message.content == "The answer is 42."


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", -1, 1e308, 86400.5])  # past a day: a deadline gRPC cannot keep
async def test_a_timeout_that_is_no_number_of_seconds_is_refused(gateway, timeout):
    body = await call(gateway, "POST", "/api/v1/mcp/servers", json={
        "name": "calc", "url": "http://127.0.0.1:9/mcp", "server_type": "streamable-http", "timeout": timeout})
    assert body["code"] != 0 and "timeout" in body["message"], body


async def test_bodies_and_queries_are_read_with_the_models_the_document_publishes(stack):
    """Checked at the edge, before the orchestrator is asked: a field of the wrong type is 101 naming it."""
    async def post(path: str, body: dict) -> dict:
        return await (await stack.client.post(path, json=body, headers=stack.auth())).json()

    ok = {"name": "calc", "url": "http://127.0.0.1:9/mcp", "server_type": "sse"}
    for path, body, field in [("/api/v1/mcp/servers", {**ok, "name": 5}, "name"),
                              ("/api/v1/mcp/servers", {**ok, "headers": 3}, "headers"),
                              ("/api/v1/mcp/servers", {**ok, "timeout": "soon"}, "timeout"),
                              ("/api/v1/mcp/servers/x/test", {"url": ["u"], "server_type": "sse"}, "url"),
                              ("/api/v1/mcp/servers/import", {"mcpServers": ["calc"]}, "mcpServers")]:
        answer = await post(path, body)
        assert answer["code"] == 101 and f"`{field}" in answer["message"], (path, answer)
    too_many = await (await stack.client.get("/api/v1/mcp/servers?page_size=101", headers=stack.auth())).json()
    assert too_many == {"code": 101, "message": "page_size must be less than or equal to 100", "data": False}
    document = await (await stack.client.get("/openapi.json")).json()
    create = document["paths"]["/api/v1/mcp/servers"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert document["components"]["schemas"][create["$ref"].rsplit("/", 1)[-1]]["required"] == ["name", "url", "server_type"]
