"""An Agent (scripted model in the real llm_gateway) calls the tools of MCP servers saved for its tenant in the
real Redis store, served by a real FastMCP server (tests/support/mcp_server.py)."""
from __future__ import annotations

import uuid
from typing import Any

import pytest

from services.common.errors import AlreadyExists, NotFound
from services.orchestrator.components.agent import Agent
from services.orchestrator.egress import mcp as mc
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import NodeFinished, RunFinished, ToolCallFinished
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.engine.validate import compile_plan
from services.orchestrator.store.mcp_servers import McpServerStore
from tests.support.canvas import cpn, of, registered
from tests.support.llm_gateway import llm_gateway
from tests.support.mcp_server import serving
from tests.support.net import free_port
from tests.support.tool_doubles import EchoTool

LOOPBACK = EngineSettings(ssrf_allowlist=("127.0.0.1",), mcp_timeout_s=5.0)


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"  # the test Redis lives for the whole session


async def save(store: McpServerStore, tenant: str, name: str, url: str, kind: str = "streamable-http",
               **kw: Any) -> tuple[str, dict[str, Any]]:
    """Saves a server with the tools it lists (as CreateMcpServer does); (id, tools by name)."""
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http:
        tools = await mc.list_tools(mc.McpServer(name, url, kind, **kw), mc.McpAccess(http))
    by_name = {t["name"]: t for t in tools}
    variables = {**kw.pop("variables", {}), "tools": by_name}
    record = await store.create(tenant, name=name, url=url, server_type=kind, variables=variables, **kw)
    return record.id, by_name


def agent_dsl(mcp: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", ["Message:m"], {
            "llm_id": "helper@Scripted", "sys_prompt": "Use the tools.", "max_rounds": 3,
            "prompts": [{"role": "user", "content": "{sys.query}"}], "tools": tools or [], "mcp": mcp}, ["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}, ["Agent:a"])}}


async def run_agent(dsl: dict[str, Any], llm: Any, store: McpServerStore, tenant: str,
                    settings: EngineSettings = LOOPBACK) -> list[Any]:
    plan = compile_plan(load_canvas(dsl))
    svc = Services(settings=settings, llm=llm.client, mcp_servers=store)
    req = RunRequest(run_id="run-1", session_id="s-1", query="go", tenant_id=tenant)
    events = [ev async for ev in run(plan, req, None, svc)]
    assert isinstance(events[-1], RunFinished)
    return events


async def test_an_agent_calls_an_mcp_tool_and_reads_its_answer(redis_client, tenant):
    store = McpServerStore(redis_client)
    async with serving(token="tok-9") as base:
        headers = {"Authorization": "Bearer $authorization_token"}
        mcp_id, tools = await save(store, tenant, "calc", base + "/mcp", headers=headers,
                                   variables={"authorization_token": "tok-9"})
        sse_id, sse_tools = await save(store, tenant, "shouter", base + "/sse", "sse", headers=headers,
                                       variables={"authorization_token": "tok-9"})
        dsl = agent_dsl([{"mcp_id": mcp_id, "tools": {"add": tools["add"], "whoami": tools["whoami"]}},
                         {"mcp_id": sse_id, "tools": {"shout": sse_tools["shout"]}}],
                        tools=[{"component_name": "TestEchoTool", "name": "echo", "params": {}}])
        scripts = {"chat": {"helper": [
            {"tool_calls": [{"name": "add_1", "arguments": {"a": 2, "b": 40}},
                            {"name": "whoami_2", "arguments": {}},
                            {"name": "shout_3", "arguments": {"text": "done"}}]},
            "The sum is {last_tool}"]}}
        with registered(EchoTool):
            async with llm_gateway(scripts) as llm:
                events = await run_agent(dsl, llm, store, tenant)
                [first, second] = llm.calls_to("helper")
    assert events[-1].error is None, events[-1].error
    assert [t.name for t in first.tools] == ["echo_0", "add_1", "whoami_2", "shout_3"]
    add_tool = next(t for t in first.tools if t.name == "add_1")
    assert add_tool.description == "Adds two integers." and add_tool.parameters["required"] == ["a", "b"]
    results = {e.tool_name: (e.result, e.error) for e in of(events, ToolCallFinished, "Agent:a")}
    assert results == {"add_1": ("42", None), "whoami_2": ("Bearer tok-9", None), "shout_3": ("DONE!", None)}
    observed = [m.content for m in second.messages if m.role == "tool"]
    assert observed == ["42", "Bearer tok-9", "DONE!"]
    [msg] = of(events, NodeFinished, "Message:m")
    assert msg.outputs["content"] == "The sum is DONE!"


async def test_a_server_down_or_too_slow_is_an_observation_and_the_agent_goes_on(redis_client, tenant):
    store = McpServerStore(redis_client)
    async with serving() as base:
        slow_id, tools = await save(store, tenant, "slow", base + "/mcp")
    down = await store.create(tenant, name="down", url=f"http://127.0.0.1:{free_port()}/mcp",
                              server_type="streamable-http")
    async with serving() as base:  # a new port: "slow" now points at nothing, so serve it again there
        await store.update(tenant, slow_id, url=base + "/mcp", timeout_s=0.5)  # the server's own limit
        dsl = agent_dsl([{"mcp_id": slow_id, "tools": {"nap": tools["nap"]}},
                         {"mcp_id": down.id, "tools": {"add": tools["add"]}},
                         {"mcp_id": "0" * 32, "tools": {"shout": tools["shout"]}}])
        scripts = {"chat": {"helper": [
            {"tool_calls": [{"name": "nap_0", "arguments": {"seconds": 30}},
                            {"name": "add_1", "arguments": {"a": 1, "b": 1}},
                            {"name": "shout_2", "arguments": {"text": "x"}}]},
            "Nothing worked."]}}
        async with llm_gateway(scripts) as llm:
            events = await run_agent(dsl, llm, store, tenant)
    assert events[-1].error is None
    calls = {e.tool_name: e for e in of(events, ToolCallFinished, "Agent:a")}
    assert calls["nap_0"].error == (f"MCP server 'slow' ({base}/mcp): could not call tool 'nap': "
                                    "no answer within 0.5 s")
    assert calls["nap_0"].result == "Error: " + calls["nap_0"].error
    assert "MCP server 'down'" in calls["add_1"].error and "cannot connect" in calls["add_1"].error
    assert calls["shout_2"].error == f"MCP server {'0' * 32} of tool 'shout': Cannot find MCP server {'0' * 32} for user {tenant}"
    assert of(events, NodeFinished, "Message:m")[0].outputs["content"] == "Nothing worked."


async def test_another_tenants_server_is_not_found(redis_client, tenant):
    store = McpServerStore(redis_client)
    async with serving() as base:
        mcp_id, tools = await save(store, tenant, "calc", base + "/mcp")
        dsl = agent_dsl([{"mcp_id": mcp_id, "tools": {"add": tools["add"]}}])
        scripts = {"chat": {"helper": [{"tool_calls": [{"name": "add_0", "arguments": {"a": 1, "b": 2}}]}, "ok"]}}
        async with llm_gateway(scripts) as llm:
            events = await run_agent(dsl, llm, store, "someone-else")
    [call] = of(events, ToolCallFinished, "Agent:a")
    assert "Cannot find MCP server" in call.error


async def test_store_names_are_unique_per_tenant_and_imports_are_renamed(redis_client, tenant):
    store = McpServerStore(redis_client)
    first = await store.create(tenant, name="calc", url="http://a", server_type="sse")
    with pytest.raises(AlreadyExists, match="Duplicated MCP server name."):
        await store.create(tenant, name="calc", url="http://b", server_type="sse")
    assert await store.free_name(tenant, "calc") == "calc_0"
    other = await store.create(f"{tenant}-b", name="calc", url="http://b", server_type="sse")  # another tenant
    renamed = await store.update(tenant, first.id, name="calc2", timeout_s=7)
    assert (renamed.name, renamed.timeout_s) == ("calc2", 7.0)
    assert await store.free_name(tenant, "calc") == "calc"
    await store.delete(tenant, first.id)
    with pytest.raises(NotFound):
        await store.get(tenant, first.id)
    with pytest.raises(NotFound):
        await store.get(tenant, other.id)


def test_validation_names_a_bad_mcp_entry():
    issues = Agent.check("Agent:a", {"llm_id": "x@Scripted", "mcp": [{"tools": {}}, {"mcp_id": "m", "tools": []}]})
    assert [(i.field, i.message) for i in issues] == [
        ("params.mcp[0].mcp_id", "must name an MCP server (its id)"),
        ("params.mcp[1].tools", "must be an object {tool name: tool}")]


async def test_a_run_opens_one_session_per_server_and_closes_them_at_its_end(redis_client, tenant):
    store = McpServerStore(redis_client)
    counts: dict[str, int] = {}
    async with serving(counts=counts) as base:
        mcp_id, tools = await save(store, tenant, "calc", base + "/mcp")
        sse_id, sse_tools = await save(store, tenant, "shouter", base + "/sse", "sse")
        dsl = agent_dsl([{"mcp_id": mcp_id, "tools": {"add": tools["add"]}},
                         {"mcp_id": sse_id, "tools": {"shout": sse_tools["shout"]}}])
        scripts = {"chat": {"helper": [
            {"tool_calls": [{"name": "add_0", "arguments": {"a": 1, "b": 2}},
                            {"name": "add_0", "arguments": {"a": 3, "b": 4}},
                            {"name": "shout_1", "arguments": {"text": "one"}}]},
            {"tool_calls": [{"name": "add_0", "arguments": {"a": 5, "b": 6}},
                            {"name": "shout_1", "arguments": {"text": "two"}}]},
            "done: {last_tool}"]}}
        counts.clear()  # saving listed the tools, one session each
        async with llm_gateway(scripts) as llm:
            events = await run_agent(dsl, llm, store, tenant)
    assert events[-1].error is None, events[-1].error
    results = sorted(e.result for e in of(events, ToolCallFinished, "Agent:a"))
    assert results == ["11", "3", "7", "ONE!", "TWO!"]
    assert counts.get("tools/call") == 5
    assert counts.get("initialize") == 2  # one session per server for the whole run, not one per call
    assert not mc._RUN_POOLS  # the run's end closed its sessions and forgot the pool
