"""Durable runs over HTTP, against a real orchestrator and Redis: every SSE frame carries an `id:`; a client
that sends it back as `Last-Event-ID` gets the rest of the run in the same dialect; the run status routes;
UserFillUp's `user_inputs` and the resume with `inputs`."""

from __future__ import annotations

import json
import uuid

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app

KEY = "rejoin-key"


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


ECHO = {"components": {
    "begin": cpn("Begin", ["Message:Out"]),
    "Message:Out": cpn("Message", [], {"content": ["You said: {sys.query}"]}, ["begin"]),
}}
FILL_UP = {"components": {
    "begin": cpn("Begin", ["UserFillUp:Ask"]),
    "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
        "tips": "Which city, {sys.query}?", "inputs": {"city": {"name": "city", "type": "line", "optional": False}}},
        ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["Going to {UserFillUp:Ask@city}"]}, ["UserFillUp:Ask"]),
}}


@pytest.fixture
async def client(orchestrator_addr, stack):
    cfg = stack.config(api_keys={KEY: f"rejoin-{uuid.uuid4().hex[:8]}"},
                       upstreams={**stack.config().upstreams, "orchestrator": orchestrator_addr})
    c = TestClient(TestServer(create_app(cfg)))
    await c.start_server()
    yield c
    await c.close()


def headers(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", **extra}


async def create_agent(client: TestClient, dsl: dict) -> str:
    body = await (await client.post("/api/v1/agents", json={"title": uuid.uuid4().hex, "dsl": dsl},
                                    headers=headers())).json()
    assert body["code"] == 0, body
    return body["data"]["id"]


async def frames(resp) -> list[tuple[str, str]]:
    """(id, data) of each SSE frame."""
    out = []
    for block in (await resp.text()).split("\n\n"):
        lines = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        if "data" in lines:
            out.append((lines.get("id", "").strip(), lines["data"]))
    return out


async def test_every_frame_has_an_id_and_last_event_id_replays_the_rest(client) -> None:
    agent_id = await create_agent(client, ECHO)
    resp = await client.post("/api/v1/agents/chat/completions", headers=headers(),
                             json={"agent_id": agent_id, "query": "hi", "stream": True})
    got = await frames(resp)
    assert got[-1][1] == "[DONE]" and all(fid for fid, data in got[:-1])
    run_id, seq = got[1][0].rsplit(":", 1)
    events = [json.loads(data) for _, data in got[:-1]]
    assert events[0]["message_id"] == run_id

    again = await client.post("/api/v1/agents/chat/completions", headers=headers(**{"Last-Event-ID": got[1][0]}),
                              json={"agent_id": agent_id, "query": "hi", "stream": True})
    rest = await frames(again)
    assert [json.loads(d)["event"] for _, d in rest[:-1]] == [e["event"] for e in events[2:]]
    text = "".join(json.loads(d)["data"].get("content", "") for _, d in rest[:-1] if json.loads(d)["event"] == "message")
    assert text == "You said: hi"

    for nonsense in ("nonsense", f"{run_id}:²", f"{run_id}:99999999999999999999", f"{run_id}:-1"):
        bad = await client.post("/api/v1/agents/chat/completions", headers=headers(**{"Last-Event-ID": nonsense}),
                                json={"agent_id": agent_id, "query": "hi", "stream": True})
        body = await bad.json()
        assert body["code"] != 0 and "Last-Event-ID" in body["message"], nonsense

    status = await (await client.get(f"/api/v1/agents/{agent_id}/runs/{run_id}", headers=headers())).json()
    assert status["code"] == 0 and status["data"]["status"] == "succeeded"
    assert status["data"]["path"] == ["begin", "Message:Out"]
    missing = await (await client.get(f"/api/v1/agents/{agent_id}/runs/{uuid.uuid4().hex}", headers=headers())).json()
    assert missing["code"] != 0 and "not found" in missing["message"]


async def test_user_fill_up_over_ragflow_sse_then_resume_with_inputs(client) -> None:
    agent_id = await create_agent(client, FILL_UP)
    session = await (await client.post(f"/api/v1/agents/{agent_id}/sessions", json={}, headers=headers())).json()
    session_id = session["data"]["id"]
    first = await client.post("/api/v1/agents/chat/completions", headers=headers(),
                              json={"agent_id": agent_id, "query": "friend", "stream": True, "session_id": session_id})
    events = [json.loads(d) for _, d in (await frames(first))[:-1]]
    [asked] = [e for e in events if e["event"] == "user_inputs"]
    assert asked["data"]["tips"] == "Which city, friend?" and "city" in asked["data"]["inputs"]

    runs = await (await client.get(f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs", headers=headers())).json()
    assert [r["status"] for r in runs["data"]] == ["waiting_for_user"]
    assert runs["data"][0]["waiting_for"] == "UserFillUp:Ask"

    second = await client.post("/api/v1/agents/chat/completions", headers=headers(), json={
        "agent_id": agent_id, "stream": True, "session_id": session_id,
        "inputs": {"city": {"type": "line", "value": "Lisbon"}}})
    events = [json.loads(d) for _, d in (await frames(second))[:-1]]
    text = "".join(e["data"].get("content", "") for e in events if e["event"] == "message")
    assert text == "Going to Lisbon"
    runs = await (await client.get(f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs", headers=headers())).json()
    assert [r["status"] for r in runs["data"]] == ["succeeded", "succeeded"]
    assert runs["data"][0]["parent_run_id"] == runs["data"][1]["id"]


@pytest.mark.parametrize("dialect", ["openai", "envelope"])
async def test_last_event_id_rejoins_in_the_openai_and_envelope_dialects(client, dialect) -> None:
    agent_id = await create_agent(client, ECHO)
    if dialect == "openai":
        path, body = "/v1/chat/completions", {"model": agent_id, "stream": True,
                                              "messages": [{"role": "user", "content": "hey"}]}
    else:
        path, body = f"/api/v1/agents/{agent_id}/stream", {"query": "hey"}
    got = await frames(await client.post(path, headers=headers(), json=body))
    ids = [fid for fid, _ in got if fid]
    assert ids and len(set(ids)) == len(ids)  # every frame that moved the stream on names where it is
    run_id = ids[0].rsplit(":", 1)[0]

    async def rejoin(after: str) -> list[str]:
        return [d for _, d in await frames(await client.post(path, headers=headers(**{"Last-Event-ID": after}), json=body))]

    if dialect == "openai":
        def text(frames_: list[str]) -> str:
            chunks = [json.loads(d) for d in frames_ if d.strip() != "[DONE]"]
            return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    else:
        def text(frames_: list[str]) -> str:
            return "".join(json.loads(d)["data"]["delta"] for d in frames_ if json.loads(d)["type"] == "content")
    assert text([d for _, d in got]) == "You said: hey"
    assert text(await rejoin(f"{run_id}:1")) == "You said: hey"  # after RunStarted: all of the answer
    assert text(await rejoin(ids[-1])) == ""  # after the last event: nothing more to say


async def test_on_disconnect_continue_keeps_the_run_going_for_a_later_rejoin(client) -> None:
    agent_id = await create_agent(client, FILL_UP)
    resp = await client.post("/api/v1/agents/chat/completions", headers=headers(), json={
        "agent_id": agent_id, "query": "q", "stream": True, "on_disconnect": "continue"})
    got = await frames(resp)
    run_id = got[0][0].rsplit(":", 1)[0]
    status = await (await client.get(f"/api/v1/agents/{agent_id}/runs/{run_id}", headers=headers())).json()
    assert status["data"]["status"] in ("running", "waiting_for_user")
    bad = await client.post("/api/v1/agents/chat/completions", headers=headers(), json={
        "agent_id": agent_id, "query": "q", "stream": True, "on_disconnect": "sometimes"})
    body = await bad.json()
    assert body["code"] != 0 and "on_disconnect" in body["message"]
