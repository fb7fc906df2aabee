"""Background runs over the real stack: `"background": true` answers 202 with the run and session ids while the
run is held at a gate, `join` answers 202 while it runs and its result once it ended, `events` streams it in a
dialect from the start or from any Last-Event-ID, and the run finishes without any caller attached."""

from __future__ import annotations

import json

import pytest

from tests.support.trigger_stack import gated_canvas, trigger_stack


@pytest.fixture
async def s(redis_server):
    async with trigger_stack(redis_server.url) as stack:
        yield stack


async def frames(resp) -> list[tuple[str, dict | str]]:
    """(id, data) of each SSE frame until the stream ends."""
    out, event_id, data = [], "", None
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("data:"):
            text = line[5:].strip()
            data = text if text == "[DONE]" else json.loads(text)
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line == "" and data is not None:
            out.append((event_id, data))
            event_id, data = "", None
    return out


async def start(s, agent_id: str, **body) -> dict:
    resp = await s.client.post("/api/v1/agents/chat/completions", headers=s.auth(),
                               json={"agent_id": agent_id, "query": "go", "background": True, **body})
    assert resp.status == 202
    answer = await resp.json()
    assert answer["code"] == 0 and answer["data"]["status"] == "running"
    return answer["data"]


async def test_background_run_answers_202_then_join_waits_for_its_result(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    ids = await start(s, agent_id)
    run_path = f"/api/v1/agents/{agent_id}/runs/{ids['run_id']}"
    await s.gate.reached.wait()  # the caller is gone; the run goes on
    run = await s.call("GET", run_path)
    assert (run["data"]["status"], run["data"]["session_id"]) == ("running", ids["session_id"])

    resp = await s.client.get(f"{run_path}/join", params={"timeout": "0"}, headers=s.auth())
    assert resp.status == 202
    assert (await resp.json())["data"] == {**ids, "status": "running"}

    s.gate.opened.set()
    resp = await s.client.get(f"{run_path}/join", headers=s.auth())
    assert resp.status == 200
    joined = await resp.json()
    assert joined["data"]["data"]["content"] == "done: gate open"
    assert (await s.call("GET", run_path))["data"]["status"] == "succeeded"
    openai = await s.call("GET", f"{run_path}/join", params={"dialect": "openai"})
    assert openai["choices"][0]["message"]["content"] == "done: gate open"


async def test_events_stream_from_any_last_event_id(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    ids = await start(s, agent_id, session_id=None)
    run_path = f"/api/v1/agents/{agent_id}/runs/{ids['run_id']}"
    await s.gate.reached.wait()
    s.gate.opened.set()
    everything = await frames(await s.client.get(f"{run_path}/events", headers=s.auth()))
    assert everything[-1][1] == "[DONE]"
    names = [d["event"] for _, d in everything[:-1]]
    assert names[0] == "workflow_started" and names[-1] == "workflow_finished"
    seqs = [int(i.rsplit(":", 1)[1]) for i, _ in everything[:-1]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    middle = everything[2][0]  # rejoin after the third event: the rest, exactly
    rest = await frames(await s.client.get(f"{run_path}/events", headers={**s.auth(), "Last-Event-ID": middle}))
    assert rest == everything[3:]

    envelope = await frames(await s.client.get(f"{run_path}/events", params={"dialect": "envelope"}, headers=s.auth()))
    assert envelope[-1][1]["type"] == "done"

    other = await s.client.get(f"{run_path}/events", headers={**s.auth(), "Last-Event-ID": "another-run:3"})
    assert (await other.json())["code"] == 101


async def test_a_background_run_is_only_its_tenants(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    ids = await start(s, agent_id)
    s.gate.opened.set()
    other = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{ids['run_id']}/join", key=s.key_b)
    assert other["code"] == 102
    ended = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{ids['run_id']}/join")
    assert ended["data"]["data"]["content"] == "done: gate open"


async def test_openai_route_answers_202_with_the_ids_and_join_answers_the_chat_completion(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    resp = await s.client.post("/v1/chat/completions", headers=s.auth(), json={
        "model": agent_id, "messages": [{"role": "user", "content": "go"}], "background": True})
    assert resp.status == 202
    accepted = await resp.json()
    assert accepted["object"] == "chat.completion.run" and accepted["status"] == "in_progress"
    assert accepted["model"] == agent_id and accepted["id"] == accepted["run_id"] and accepted["session_id"]
    run_path = f"/api/v1/agents/{agent_id}/runs/{accepted['run_id']}"
    await s.gate.reached.wait()  # the caller is gone; the run goes on
    run = await s.call("GET", run_path)
    assert (run["data"]["status"], run["data"]["session_id"]) == ("running", accepted["session_id"])

    s.gate.opened.set()
    joined = await s.call("GET", f"{run_path}/join", params={"dialect": "openai"})
    assert joined["object"] == "chat.completion"
    assert joined["choices"][0]["message"]["content"] == "done: gate open"
    # the session the run made continues on the same route
    resp = await s.client.post("/v1/chat/completions", headers=s.auth(), json={
        "model": agent_id, "session_id": accepted["session_id"], "messages": [{"role": "user", "content": "again"}],
        "background": True})
    assert resp.status == 202 and (await resp.json())["session_id"] == accepted["session_id"]


async def test_envelope_route_answers_202_with_an_envelope_and_events_stream_the_run(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/stream", headers=s.auth(),
                               json={"query": "go", "background": True})
    assert resp.status == 202
    accepted = await resp.json()
    assert accepted["type"] == "status" and accepted["data"] == {"status": "run_started", "background": True}
    assert accepted["run_id"] and accepted["thread_id"]
    run_path = f"/api/v1/agents/{agent_id}/runs/{accepted['run_id']}"
    await s.gate.reached.wait()
    assert (await s.call("GET", run_path))["data"]["status"] == "running"

    s.gate.opened.set()
    envelopes = [d for _, d in await frames(await s.client.get(f"{run_path}/events", params={"dialect": "envelope"},
                                                                headers=s.auth()))]
    assert envelopes[-1]["type"] == "done"
    assert {e["thread_id"] for e in envelopes} == {accepted["thread_id"]}
    assert "done: gate open" in json.dumps([e["data"] for e in envelopes])
    joined = await s.call("GET", f"{run_path}/join")
    assert joined["data"]["data"]["content"] == "done: gate open"


async def test_background_refuses_a_bad_body_before_starting(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/stream", headers=s.auth(),
                               json={"query": "go", "background": "later"})
    assert resp.status == 400
    assert "background" in (await resp.json())["data"]["message"]
