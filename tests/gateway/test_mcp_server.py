"""The agents as MCP tools, driven by the official `mcp` client over Streamable HTTP against a real gateway,
orchestrator (test Redis) and llm_gateway: listing, a call with streamed progress and `structuredContent`, a
second call continuing the session, a UserFillUp pause answered by elicitation and without it, a cancel, and
tenants sealed from each other."""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from tests.support.agent_services import ECHO, FILL_UP, SLOW, agent_stack


@pytest.fixture
async def stack(redis_server):
    async with agent_stack(redis_server.url) as s:
        yield s


@asynccontextmanager
async def mcp_session(url: str, key: str, **kw):
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as (read, write, _), ClientSession(read, write, **kw) as session:
        await session.initialize()
        yield session


async def test_lists_the_published_agents_and_calls_one_with_progress_and_a_continued_session(stack):
    echo = await stack.create(ECHO, title="Echo Bot!", description="Repeats what you say.")
    await stack.create(ECHO, title="Draft only", publish=False)
    async with mcp_session(f"{stack.url}/mcp", stack.key_a) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"echo_bot"}
        tool = tools["echo_bot"]
        assert tool.description == "Repeats what you say."
        props = tool.inputSchema["properties"]
        assert {"query", "session_id", "inputs", "tone"} <= set(props)
        assert props["tone"]["enum"] == ["warm", "dry"]

        progress: list[str | None] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(message)

        first = await session.call_tool("echo_bot", {"query": "hello", "tone": "dry"}, progress_callback=on_progress)
        assert not first.isError
        assert first.content[0].text == "You said: hello"
        out = first.structuredContent
        assert out["answer"] == "You said: hello" and out["status"] == "completed"
        assert out["session_id"] and out["run_id"] and out["references"] == []
        assert "begin finished" in progress and "Message:Out finished" in progress

        second = await session.call_tool("echo_bot", {"query": "again", "session_id": out["session_id"]})
        assert second.structuredContent["session_id"] == out["session_id"]
        assert second.structuredContent["run_id"] != out["run_id"]
    runs = await stack.call("GET", f"/api/v1/agents/{echo}/sessions/{out['session_id']}/runs")
    assert [r["status"] for r in runs["data"]] == ["succeeded", "succeeded"]

    async with mcp_session(f"{stack.url}/api/v1/agents/{echo}/mcp", stack.key_a) as one:
        [only] = (await one.list_tools()).tools
        assert only.name == "echo_bot"
        assert (await one.call_tool("echo_bot", {"query": "hi"})).structuredContent["answer"] == "You said: hi"


async def test_user_fill_up_becomes_an_elicitation(stack):
    await stack.create(FILL_UP, title="Travel")
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"city": "Lisbon"})

    async with mcp_session(f"{stack.url}/mcp", stack.key_a, elicitation_callback=elicit) as session:
        result = await session.call_tool("travel", {"query": "trip"})
    assert result.structuredContent["answer"] == "Going to Lisbon"
    assert result.structuredContent["status"] == "completed"
    [params] = asked
    assert params.message == "Which city?"
    assert params.requestedSchema["properties"]["city"]["type"] == "string"
    assert params.requestedSchema["required"] == ["city"]


async def test_user_fill_up_without_elicitation_says_what_it_awaits_and_takes_the_answer(stack):
    await stack.create(FILL_UP, title="Travel")
    async with mcp_session(f"{stack.url}/mcp", stack.key_a) as session:
        paused = await session.call_tool("travel", {"query": "trip"})
        out = paused.structuredContent
        assert out["status"] == "input_required" and not paused.isError
        assert out["awaiting"]["tips"] == "Which city?" and "city" in out["awaiting"]["fields"]["properties"]
        text = paused.content[0].text
        assert "Which city?" in text and out["session_id"] in text and "inputs" in text
        done = await session.call_tool("travel", {"session_id": out["session_id"], "inputs": {"city": "Porto"}})
    assert done.structuredContent["answer"] == "Going to Porto"


async def test_a_client_cancellation_cancels_the_run(stack):
    agent_id = await stack.create(SLOW, title="Talker")
    async with mcp_session(f"{stack.url}/mcp", stack.key_a) as session:
        started = anyio.Event()
        tokens: list[types.ProgressToken] = []
        failure: list[BaseException] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            started.set()

        # The client's progress token is its request id: the id the cancellation names.
        original = session.send_request

        async def send_request(request, *args, **kw):
            tokens.append(session._request_id)  # the id this request is about to get
            return await original(request, *args, **kw)

        session.send_request = send_request  # type: ignore[method-assign]

        async def call() -> None:
            try:
                await session.call_tool("talker", {"query": "talk"}, progress_callback=on_progress)
            except McpError as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()
            await session.send_notification(types.ClientNotification(types.CancelledNotification(
                params=types.CancelledNotificationParams(requestId=tokens[-1], reason="changed my mind"))))
        assert failure and "cancel" in str(failure[0]).lower()

    sessions = await stack.call("GET", f"/api/v1/agents/{agent_id}/sessions")
    [session_row] = sessions["data"]
    runs = await stack.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_row['id']}/runs")
    run_id = runs["data"][0]["id"]
    # The run's stream, rejoined from its start, ends when the run does: then its status is final.
    rejoined = await stack.client.post("/api/v1/agents/chat/completions", headers={
        **stack.auth(), "Last-Event-ID": f"{run_id}:0"}, json={"agent_id": agent_id, "query": "-", "stream": True})
    assert (await rejoined.text()).rstrip().endswith("[DONE]")
    status = await stack.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}")
    assert status["data"]["status"] == "cancelled"


async def test_tenants_are_sealed(stack):
    agent_a = await stack.create(ECHO, title="Secret")
    async with mcp_session(f"{stack.url}/mcp", stack.key_b) as session:
        assert (await session.list_tools()).tools == []
        result = await session.call_tool("secret", {"query": "hi"})
        assert result.isError and "unknown tool" in result.content[0].text
    async with httpx.AsyncClient() as http:
        for key, status in ((stack.key_b, 404), ("wrong", 401), (None, 401)):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            resp = await http.post(f"{stack.url}/api/v1/agents/{agent_a}/mcp", headers=headers, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
            assert resp.status_code == status, (key, resp.text)
        resp = await http.post(f"{stack.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
    # A session made with key A cannot be driven with key B, even with its id.
    async with httpx.AsyncClient(headers=stack.auth()) as http_a, \
            streamable_http_client(f"{stack.url}/mcp", http_client=http_a) as (read, write, get_id):
        async with ClientSession(read, write) as session:
            await session.initialize()
            session_id = get_id()
            async with httpx.AsyncClient() as http:
                resp = await http.post(f"{stack.url}/mcp", headers={
                    **stack.auth(stack.key_b), "mcp-session-id": session_id, "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json"}, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
            assert resp.status_code == 404
