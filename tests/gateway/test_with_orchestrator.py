"""The gateway in front of the real orchestrator (Redis-backed): the clients people have get the answer."""

from __future__ import annotations

import json
import uuid

import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app

KEY_A, KEY_B = "real-key-a", "real-key-b"


def _dsl(message: str = "You said: {sys.query}") -> dict:
    """Begin (with a prologue) -> Message: answers without any LLM."""
    return {"components": {
        "begin": {"obj": {"component_name": "Begin", "params": {"prologue": "Hello there!"}},
                  "downstream": ["Message:Out"], "upstream": []},
        "Message:Out": {"obj": {"component_name": "Message", "params": {"content": [message]}},
                        "downstream": [], "upstream": ["begin"]}},
        "history": [], "path": [], "retrieval": []}


@pytest.fixture
async def gateway(orchestrator_addr, stack):
    run = uuid.uuid4().hex[:8]  # the test Redis lives for the whole session: fresh tenants per test
    cfg = stack.config(api_keys={KEY_A: f"real-a-{run}", KEY_B: f"real-b-{run}"},
                       upstreams={**stack.config().upstreams, "orchestrator": orchestrator_addr})
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    yield client
    await client.close()


def _url(client: TestClient) -> str:
    return str(client.server.make_url("")).rstrip("/")


def _h(key: str = KEY_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _create_agent(client: TestClient, title: str = "Echo") -> str:
    body = await (await client.post("/api/v1/agents", json={"title": title, "dsl": _dsl()}, headers=_h())).json()
    assert body["code"] == 0, body
    return body["data"]["id"]


async def test_raw_stream_ends_with_done_and_workflow_path_sends_everything(gateway):
    agent_id = await _create_agent(gateway)
    resp = await gateway.post("/api/v1/agents/chat/completions", headers=_h(),
                              json={"agent_id": agent_id, "query": "hi", "stream": True})
    raw = (await resp.read()).decode()
    frames = [f for f in raw.split("\n\n") if f]
    assert all(f.startswith("data:{") for f in frames[:-1]) and frames[-1] == "data:[DONE]"
    events = [json.loads(f.split("\n", 1)[0][5:])["event"] for f in frames[:-1]]  # then its `id:` line
    assert events[0] == "workflow_started" and events[-1] == "workflow_finished"
    assert {"node_started", "node_finished", "message", "message_end"} <= set(events)


async def test_openai_client_stream_and_not(gateway):
    agent_id = await _create_agent(gateway)
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=_url(gateway) + "/v1", max_retries=0) as client:
        done = await client.chat.completions.create(model=agent_id, messages=[{"role": "user", "content": "one"}])
        stream = await client.chat.completions.create(model=agent_id, stream=True,
                                                      messages=[{"role": "user", "content": "two"}])
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        models = [m.id async for m in client.models.list()]
    assert done.choices[0].message.content == "You said: one"
    assert text == "You said: two"
    assert models == [agent_id]


async def test_envelope_stream(gateway):
    agent_id = await _create_agent(gateway)
    resp = await gateway.post(f"/api/v1/agents/{agent_id}/stream", json={"query": "env"}, headers=_h())
    frames = [json.loads(f.split("\n", 1)[0][6:]) for f in (await resp.read()).decode().split("\n\n") if f]
    assert frames[0]["type"] == "thread_id" and frames[-1]["type"] == "done"
    assert "".join(f["data"]["delta"] for f in frames if f["type"] == "content") == "You said: env"


async def test_tenant_b_sees_nothing_of_tenant_a(gateway):
    agent_id = await _create_agent(gateway)
    session = (await (await gateway.post(f"/api/v1/agents/{agent_id}/sessions", headers=_h())).json())["data"]
    b = _h(KEY_B)
    assert (await (await gateway.get("/api/v1/agents", headers=b)).json())["data"] == {"canvas": [], "total": 0}
    for resp in [await gateway.get(f"/api/v1/agents/{agent_id}", headers=b),
                 await gateway.delete(f"/api/v1/agents/{agent_id}", headers=b),
                 await gateway.post("/api/v1/agents/chat/completions", headers=b,
                                    json={"agent_id": agent_id, "query": "x", "session_id": session["id"]})]:
        body = await resp.json()
        assert body["code"] != 0 and body["data"] is False, body
    assert (await (await gateway.get(f"/api/v1/agents/{agent_id}", headers=_h())).json())["code"] == 0


async def test_invalid_dsl_names_the_component(gateway):
    bad = _dsl()
    bad["components"]["Message:Out"]["downstream"] = ["Nowhere:X"]
    body = await (await gateway.post("/api/v1/agents", json={"title": "Bad", "dsl": bad}, headers=_h())).json()
    assert body["code"] == 101 and body["data"] is False
    assert "Message:Out" in body["message"] and "Nowhere:X" in body["message"], body["message"]


async def test_openai_fresh_conversation_sees_earlier_messages(gateway):
    body = await (await gateway.post("/api/v1/agents", headers=_h(),
                                     json={"title": "Historian", "dsl": _dsl("{sys.history}")})).json()
    agent_id = body["data"]["id"]
    client = openai.AsyncOpenAI(api_key=KEY_A, base_url=_url(gateway) + "/v1")
    reply = await client.chat.completions.create(model=agent_id, messages=[
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Hello Ada"},
        {"role": "user", "content": "who am I?"},
    ])
    answer = reply.choices[0].message.content
    assert "user: my name is Ada" in answer and "assistant: Hello Ada" in answer and "user: who am I?" in answer
    assert "be brief" not in answer
    await client.close()


@pytest.mark.parametrize("begin_params", [{}, {"mode": "task"}, {"enablePrologue": False}])
async def test_a_begin_without_prologue_greets_with_ragflows_default(gateway, begin_params):
    """RAGFlow's create_agent_session stores `[{"role": "assistant", "content": canvas.get_prologue()}]`, and
    BeginParam's prologue defaults to its greeting whatever the mode (`enablePrologue` is read by its UI only).
    The first completion streams the run alone: the greeting stays the session's first message."""
    dsl = _dsl()
    dsl["components"]["begin"]["obj"]["params"] = begin_params
    created = await (await gateway.post("/api/v1/agents", json={"title": "Plain", "dsl": dsl}, headers=_h())).json()
    agent_id = created["data"]["id"]
    session = (await (await gateway.post(f"/api/v1/agents/{agent_id}/sessions", json={}, headers=_h())).json())["data"]
    greeting = "Hi! I'm your smart assistant. What can I do for you?"
    assert [(m["role"], m["content"]) for m in session["message"]] == [("assistant", greeting)]
    resp = await gateway.post("/api/v1/agents/chat/completions", headers=_h(),
                              json={"agent_id": agent_id, "query": "hi", "session_id": session["id"], "stream": True})
    raw = (await resp.read()).decode()
    assert "You said: hi" in raw and greeting not in raw
    got = (await (await gateway.get(f"/api/v1/agents/{agent_id}/sessions/{session['id']}", headers=_h())).json())["data"]
    assert [(m["role"], m["content"]) for m in got["message"]] == [
        ("assistant", greeting), ("user", "hi"), ("assistant", "You said: hi")]
