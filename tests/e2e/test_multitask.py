"""Double-texting over the real stack (issue 32 item 5): a second message on a session whose run is held at a
gate, with each `multitask_strategy`. reject answers 409; enqueue starts once the first run ended; interrupt
cancels it and keeps its turn; rollback cancels it and takes its turn out; none refuses as busy (as always); the
agent's default comes from Begin's `multitask_strategy` param. On a session paused at a UserFillUp (not busy), a
new message under interrupt or rollback cancels the paused run and starts afresh; reject and enqueue, and any
request that carries `inputs`, answer the pause as before."""

from __future__ import annotations

import pytest

from services.orchestrator.store import keys

from tests.support.agent_services import cpn
from tests.support.trigger_stack import gated_canvas, trigger_stack
from tests.support.waiting import eventually

COMPLETIONS = "/api/v1/agents/chat/completions"


@pytest.fixture
async def s(redis_server):
    async with trigger_stack(redis_server.url) as stack:
        yield stack


async def first_run_held(s, begin: dict | None = None) -> tuple[str, dict]:
    """An agent and its first run ("first") in the background, held at the gate."""
    agent_id = await s.create(gated_canvas(s.gate.url, begin=begin))
    resp = await s.client.post(COMPLETIONS, headers=s.auth(),
                               json={"agent_id": agent_id, "query": "first", "background": True})
    assert resp.status == 202, await resp.text()
    ids = (await resp.json())["data"]
    await s.gate.reached.wait()
    return agent_id, ids


async def second(s, agent_id: str, session_id: str, **body):
    return await s.client.post(COMPLETIONS, headers=s.auth(), json={
        "agent_id": agent_id, "session_id": session_id, "query": "second", "stream": False, **body})


async def status(s, agent_id: str, run_id: str) -> str:
    return (await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}"))["data"]["status"]


async def user_messages(s, agent_id: str, session_id: str) -> list[str]:
    body = await s.call("GET", f"/api/v1/agents/{agent_id}/sessions", params={"id": session_id})
    return [m["content"] for m in body["data"][0]["messages"] if m["role"] == "user"]


async def test_without_a_strategy_a_busy_session_refuses_as_before(s):
    agent_id, first = await first_run_held(s)
    resp = await second(s, agent_id, first["session_id"])
    body = await resp.json()
    assert resp.status == 200 and body["code"] == 103 and "busy" in body["message"]
    assert await status(s, agent_id, first["run_id"]) == "running"


async def test_a_claim_left_by_an_ended_run_does_not_make_the_session_busy(s, redis_client):
    """A run's end frees its session in the round trip that stores its status; on a Redis Cluster the two land
    on different nodes, so the claim may outlive the end (for a moment, or the lease's rest if that write failed).
    Here the claim is put back after the run ended, as such a failed write leaves it."""
    agent_id, first = await first_run_held(s)
    s.gate.opened.set()
    await eventually(lambda: _ended(s, agent_id, first["run_id"]), what="the first run's end")
    claim = keys.session_active_run(s.tenant_a, first["session_id"])
    await redis_client.set(claim, first["run_id"], px=60_000)
    body = await (await second(s, agent_id, first["session_id"])).json()
    assert body["code"] == 0, body
    assert await user_messages(s, agent_id, first["session_id"]) == ["first", "second"]


async def _ended(s, agent_id: str, run_id: str) -> bool:
    return await status(s, agent_id, run_id) == "succeeded"


async def test_reject_answers_409_in_the_dialect(s):
    agent_id, first = await first_run_held(s)
    resp = await second(s, agent_id, first["session_id"], multitask_strategy="reject")
    body = await resp.json()
    assert resp.status == 409 and body["code"] == 103 and body["data"] is False
    assert "busy" in body["message"] and "reject" in body["message"]
    assert await status(s, agent_id, first["run_id"]) == "running"


async def test_an_unknown_strategy_is_refused(s):
    agent_id = await s.create(gated_canvas(s.gate.url))
    body = await (await second(s, agent_id, "", multitask_strategy="shout")).json()
    assert body["code"] != 0 and "multitask_strategy" in body["message"]


async def test_enqueue_starts_after_the_current_run(s):
    agent_id, first = await first_run_held(s)
    s.gate.opened.set()  # whether it ends before or after the second arrives, the second runs after it
    resp = await second(s, agent_id, first["session_id"], multitask_strategy="enqueue")
    body = await resp.json()
    assert body["code"] == 0, body
    assert body["data"]["data"]["content"] == "done: gate open"
    assert await status(s, agent_id, first["run_id"]) == "succeeded"
    assert await user_messages(s, agent_id, first["session_id"]) == ["first", "second"]




async def test_interrupt_cancels_the_current_run_and_keeps_its_turn(s):
    agent_id, first = await first_run_held(s)
    resp = await s.client.post(COMPLETIONS, headers=s.auth(), json={
        "agent_id": agent_id, "session_id": first["session_id"], "query": "second", "background": True,
        "multitask_strategy": "interrupt"})
    assert resp.status == 202, await resp.text()
    assert await status(s, agent_id, first["run_id"]) == "cancelled"
    s.gate.opened.set()
    run_id = (await resp.json())["data"]["run_id"]
    joined = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}/join")
    assert joined["data"]["data"]["content"] == "done: gate open"
    assert await user_messages(s, agent_id, first["session_id"]) == ["first", "second"]


async def test_rollback_cancels_the_current_run_and_removes_its_turn(s):
    agent_id, first = await first_run_held(s)
    resp = await s.client.post(COMPLETIONS, headers=s.auth(), json={
        "agent_id": agent_id, "session_id": first["session_id"], "query": "second", "background": True,
        "multitask_strategy": "rollback"})
    assert resp.status == 202, await resp.text()
    assert await status(s, agent_id, first["run_id"]) == "cancelled"
    s.gate.opened.set()
    run_id = (await resp.json())["data"]["run_id"]
    joined = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}/join")
    assert joined["data"]["data"]["content"] == "done: gate open"
    assert await user_messages(s, agent_id, first["session_id"]) == ["second"]


async def test_the_agents_default_strategy_applies_when_the_request_names_none(s):
    agent_id, first = await first_run_held(s, begin={"multitask_strategy": "reject"})
    resp = await second(s, agent_id, first["session_id"])
    assert resp.status == 409
    assert await status(s, agent_id, first["run_id"]) == "running"


def fill_up(begin: dict | None = None) -> dict:
    return {"components": {
        "begin": cpn("Begin", ["UserFillUp:Ask"], begin),
        "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
            "tips": "Which city?", "inputs": {"city": {"name": "city", "type": "line", "optional": False}}},
            ("begin",)),
        "Message:Out": cpn("Message", [], {"content": ["{sys.query} to {UserFillUp:Ask@city}"]},
                           ("UserFillUp:Ask",)),
    }}


async def first_run_paused(s, begin: dict | None = None) -> tuple[str, str, str]:
    """(agent id, session id, run id) of a first run ("first") paused at the form."""
    agent_id = await s.create(fill_up(begin))
    body = await s.call("POST", COMPLETIONS, json={"agent_id": agent_id, "query": "first", "stream": False})
    assert body["code"] == 0, body
    session_id = body["data"]["session_id"]
    [run] = (await s.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs"))["data"]
    assert run["status"] == "waiting_for_user"
    return agent_id, session_id, run["id"]


async def runs_of(s, agent_id: str, session_id: str) -> list[dict]:
    return (await s.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs"))["data"]


@pytest.mark.parametrize("strategy, users", [("interrupt", ["first", "second"]), ("rollback", ["second"])])
async def test_a_new_message_on_a_paused_session_cancels_the_pause_and_starts_afresh(s, strategy, users):
    agent_id, session_id, paused = await first_run_paused(s)
    body = await (await second(s, agent_id, session_id, multitask_strategy=strategy)).json()
    assert body["code"] == 0, body
    assert await status(s, agent_id, paused) == "cancelled"
    newest, *_ = await runs_of(s, agent_id, session_id)
    assert newest["id"] != paused and newest["status"] == "waiting_for_user"  # at the form again, from the start
    assert newest["parent_run_id"] is None
    assert await user_messages(s, agent_id, session_id) == users
    answered = await (await second(s, agent_id, session_id, inputs={"city": "Lisbon"})).json()
    assert answered["data"]["data"]["content"] == "second to Lisbon"


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
async def test_an_answer_on_a_paused_session_answers_it_whatever_the_strategy(s, strategy):
    agent_id, session_id, paused = await first_run_paused(s, begin={"multitask_strategy": strategy})
    body = await (await second(s, agent_id, session_id, inputs={"city": "Lisbon"})).json()
    assert body["code"] == 0 and body["data"]["data"]["content"] == "second to Lisbon", body
    assert (await runs_of(s, agent_id, session_id))[0]["parent_run_id"] == paused


@pytest.mark.parametrize("strategy", ["reject", "enqueue"])
async def test_reject_and_enqueue_leave_a_paused_session_waiting_for_its_answer(s, strategy):
    agent_id, session_id, paused = await first_run_paused(s)
    body = await (await second(s, agent_id, session_id, multitask_strategy=strategy)).json()
    assert body["code"] != 0 and "inputs" in body["message"]  # as without a strategy: not busy, so no refusal
    assert await status(s, agent_id, paused) == "waiting_for_user"
