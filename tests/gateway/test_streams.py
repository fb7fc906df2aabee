"""Streams: a client that leaves cancels the run upstream at once; a slow client holds back no other run."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.support.waiting import eventually


def _requests(stack, agent_id: str) -> dict[str, tuple[str, dict]]:
    return {
        "ragflow": ("/api/v1/agents/chat/completions", {"agent_id": agent_id, "query": "hang", "stream": True}),
        "openai": ("/v1/chat/completions", {"model": agent_id, "stream": True,
                                            "messages": [{"role": "user", "content": "hang"}]}),
        "envelope": (f"/api/v1/agents/{agent_id}/stream", {"query": "hang"}),
    }


async def test_disconnect_mid_stream_cancels_the_grpc_call(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with aiohttp.ClientSession() as http:
        for dialect, (path, body) in _requests(stack, agent.id).items():
            stack.fake.run_cancelled = asyncio.Event()
            resp = await http.post(stack.url + path, json=body, headers=stack.auth())
            seen = b""
            while b"tick" not in seen:
                seen += await asyncio.wait_for(resp.content.readany(), 5)
            assert not stack.fake.run_cancelled.is_set()
            resp.close()  # the client goes away mid-stream
            await asyncio.wait_for(stack.fake.run_cancelled.wait(), 30)  # the run would hang forever
            assert not stack.fake.active, dialect


async def test_disconnect_during_a_non_stream_run_cancels_it_too(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with aiohttp.ClientSession() as http:
        request = http.post(stack.url + "/api/v1/agents/chat/completions", headers=stack.auth(),
                            json={"agent_id": agent.id, "query": "hang"}, timeout=aiohttp.ClientTimeout(total=0.3))
        try:
            async with request:
                raise AssertionError("a hanging run cannot answer")
        except asyncio.TimeoutError:
            pass
    await asyncio.wait_for(stack.fake.run_cancelled.wait(), 30)  # the run would hang forever


async def test_a_slow_client_gets_its_backlog_merged_and_holds_back_no_other_run(stack):
    """Runs ride the gateway's shared streams of turns, whose reader never waits for a caller (docs/transport.md):
    the run of a client that stops reading goes on to its end, its output buffered in the gateway, and other
    runs on the same stream are not held back; when the client reads again, its backlog comes merged into a few
    large events (at most 64 deltas in one, services/common/coalesce.py)."""
    agent = stack.fake.add_agent(stack.tenant_a)
    path = "/api/v1/agents/chat/completions"
    async with aiohttp.ClientSession() as http:
        slow = await http.post(stack.url + path, headers=stack.auth(),
                               json={"agent_id": agent.id, "query": "flood", "stream": True})
        seen = await slow.content.readany()  # then it reads nothing for a while
        await eventually(lambda: stack.fake.flood_sent == 2000, what="the slow client's run sent all it had")
        other = await http.post(stack.url + path, headers=stack.auth(),
                                json={"agent_id": agent.id, "query": "hi", "stream": True})
        assert b"workflow_finished" in await other.read()
        async for chunk in slow.content.iter_any():
            seen += chunk
    assert seen.count(b"x") == 2000 * 32 * 1024
    assert seen.count(b"data:") < 2000  # the deltas merged as the client read them


async def test_envelope_stream_types_and_order(stack):
    import json

    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.post(f"/api/v1/agents/{agent.id}/stream", json={"message": "tools"}, headers=stack.auth())
    raw = (await resp.read()).decode()
    assert resp.headers["Cache-Control"] == "no-cache" and resp.headers["X-Accel-Buffering"] == "no"
    frames = [json.loads(f[len("data: "):]) for f in raw.split("\n\n") if f]
    assert [f["type"] for f in frames][:2] == ["thread_id", "status"]
    thread = frames[0]["data"]["thread_id"]
    assert all(set(f) == {"type", "node_name", "run_id", "timestamp", "thread_id", "data"} for f in frames)
    assert all(f["thread_id"] == thread and f["run_id"] == frames[0]["run_id"] for f in frames)
    assert frames[0]["timestamp"] == 1756364483000
    by_type = {}
    for f in frames:
        by_type.setdefault(f["type"], []).append(f)
    assert "".join(f["data"]["delta"] for f in by_type["content"]) == "Hello world"
    assert by_type["content"][0]["node_name"] == "Agent:A"
    assert by_type["tool_start"][0]["data"] == {"tool_name": "search", "tool_input": {"q": "trellis"}, "call_id": "call-1"}
    assert by_type["tool_end"][0]["data"]["tool_output"] == "3 hits"
    statuses = [f["data"]["status"] for f in by_type["status"]]
    assert statuses[:3] == ["run_started", "node_started", "node_finished"] and "node_skipped" in statuses
    assert frames[-1]["type"] == "done" and frames[-1]["data"]["usage"]["total_tokens"] == 7
    assert stack.fake.run_requests[-1].query == "tools"

    again = await stack.client.post(f"/api/v1/agents/{agent.id}/stream", json={"query": "hi", "thread_id": thread},
                                    headers=stack.auth())
    await again.read()
    assert stack.fake.run_requests[-1].session_id == thread


async def test_envelope_stream_error_then_done(stack):
    import json

    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.post(f"/api/v1/agents/{agent.id}/stream", json={"query": "explode"}, headers=stack.auth())
    frames = [json.loads(f[len("data: "):]) for f in (await resp.read()).decode().split("\n\n") if f]
    assert [f["type"] for f in frames] == ["thread_id", "status", "content", "error", "done"]
    assert frames[3]["data"]["message"] == "LLM provider failed: boom (component Agent:A)"
