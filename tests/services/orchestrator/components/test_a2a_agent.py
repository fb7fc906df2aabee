"""A2AAgent against a small A2A server that is not Trellis (JSON-RPC 1.0 on a local aiohttp server, no agent card):
the endpoint used as given, headers rendered and sent, a direct message reply, a failed task, the SSRF guard, and
the tool it makes for an Agent. A Trellis agent behind the gateway: tests/e2e/test_agents_calling_agents.py."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.orchestrator.components._tools import build_toolset
from services.orchestrator.components.a2a_agent import A2AAgent
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.settings import EngineSettings


def _sse(rpc_id: str, result: dict[str, Any]) -> bytes:
    return f"data: {json.dumps({'jsonrpc': '2.0', 'id': rpc_id, 'result': result})}\n\n".encode()


@pytest.fixture
async def agent_server() -> AsyncIterator[tuple[str, list[web.Request]]]:
    """POST /rpc: SendMessage answers with a message; SendStreamingMessage with a task that fails."""
    seen: list[tuple[dict, dict]] = []

    async def rpc(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append((dict(request.headers), body))
        text = body["params"]["message"]["parts"][0]["text"]
        if body["method"] == "SendMessage":
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"message": {
                "messageId": "m1", "role": "ROLE_AGENT", "contextId": "ctx-1", "parts": [{"text": f"Hello {text}"}]}}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_sse(body["id"], {"task": {"id": "t1", "contextId": "ctx-1",
                                                    "status": {"state": "TASK_STATE_WORKING"}}}))
        await resp.write(_sse(body["id"], {"statusUpdate": {"taskId": "t1", "contextId": "ctx-1", "status": {
            "state": "TASK_STATE_FAILED", "message": {"messageId": "m2", "role": "ROLE_AGENT",
                                                      "parts": [{"text": "quota exceeded"}]}}}}))
        return resp

    app = web.Application()
    app.router.add_post("/rpc", rpc)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/rpc")), seen
    finally:
        await server.close()


def ctx_for(params: dict, *, allow: tuple[str, ...] = ("127.0.0.1",), **globals_: Any) -> NodeContext:
    return NodeContext.for_test(params, component_id="A2AAgent:a", component_name="A2AAgent",
                                settings=EngineSettings(ssrf_allowlist=allow),
                                globals_={"sys.query": "hi", **globals_})


def test_params_are_checked():
    assert [i.field for i in A2AAgent.check("A2AAgent:a", {})] == ["params.url"]
    [issue] = A2AAgent.check("A2AAgent:a", {"url": "http://x", "headers": "[1]"})
    assert issue.field == "params.headers" and "object" in issue.message


async def test_an_endpoint_without_a_card_answers_a_message_with_the_rendered_headers(agent_server):
    url, seen = agent_server
    params = {"url": url, "streaming": False, "headers": {"Authorization": "Bearer {env.key}", "X-Empty": ""}}
    ctx = ctx_for(params, **{"env.key": "k1"})
    await A2AAgent("A2AAgent:a", params).run(ctx)
    assert ctx.output("content") == "Hello hi"
    assert (ctx.output("context_id"), ctx.output("state"), ctx.output("task_id")) == ("ctx-1", "completed", "")
    [(headers, body)] = seen
    assert headers["Authorization"] == "Bearer k1" and "X-Empty" not in headers and headers["A2A-Version"] == "1.0"
    assert body["method"] == "SendMessage"


async def test_a_failed_remote_task_fails_the_component_with_the_agents_message(agent_server):
    url, _ = agent_server
    params = {"url": url}
    with pytest.raises(RuntimeError, match=r"^A2AAgent:a: the agent at .* ended its task failed: quota exceeded$"):
        await A2AAgent("A2AAgent:a", params).run(ctx_for(params))


async def test_loopback_is_refused_without_the_allow_list(agent_server):
    url, seen = agent_server
    params = {"url": url}
    with pytest.raises(ValueError, match=r"^A2AAgent:a: params.url: refused to reach .* loopback address"):
        await A2AAgent("A2AAgent:a", params).run(ctx_for(params, allow=()))
    assert seen == []


async def test_as_a_tool_the_model_sends_a_query_taken_as_text(agent_server):
    url, seen = agent_server
    [tool] = build_toolset("Agent:a", [{"component_name": "A2AAgent", "name": "Remote Helper",
                                        "params": {"url": url, "streaming": False}}])
    assert tool.function == "Remote_Helper_0" and tool.schema.parameters["required"] == ["query"]
    ctx = ctx_for({}, **{"env.key": "k1"})
    assert await tool.component.call_tool(ctx, {"query": "there {env.key}"}) == "Hello there {env.key}"
