"""Interrupts over the real stack (issue 32 item 6): a run paused at a UserFillUp lists what it waits for (form,
tips, expiry); resolving it with inputs resumes the run once (a second resolve answers 409), and a wait past the
UserFillUp's `timeout_s` answers 410. The completion with `inputs` on the session keeps working."""

from __future__ import annotations

import pytest

from tests.support.agent_services import cpn
from tests.support.trigger_stack import trigger_stack
from tests.support.waiting import eventually

COMPLETIONS = "/api/v1/agents/chat/completions"


def fill_up(**extra) -> dict:
    return {"components": {
        "begin": cpn("Begin", ["UserFillUp:Ask"]),
        "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
            "tips": "Which city, {sys.query}?", "inputs": {"city": {"name": "city", "type": "line", "optional": False}},
            **extra}, ["begin"]),
        "Message:Out": cpn("Message", [], {"content": ["Going to {UserFillUp:Ask@city}"]}, ["UserFillUp:Ask"]),
    }}


@pytest.fixture
async def s(redis_server):
    async with trigger_stack(redis_server.url) as stack:
        yield stack


async def paused(s, dsl: dict) -> tuple[str, str, str]:
    """(agent id, session id, run id) of a run paused at the form."""
    agent_id = await s.create(dsl)
    body = await s.call("POST", COMPLETIONS, json={"agent_id": agent_id, "query": "friend", "stream": False})
    assert body["code"] == 0, body
    session_id = body["data"]["session_id"]
    runs = await s.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs")
    [run] = runs["data"]
    assert run["status"] == "waiting_for_user"
    return agent_id, session_id, run["id"]


async def interrupts(s, agent_id: str, run_id: str) -> list[dict]:
    body = await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}/interrupts")
    assert body["code"] == 0, body
    return body["data"]


async def test_an_interrupt_is_listed_resolved_once_then_409(s):
    agent_id, _, run_id = await paused(s, fill_up())
    [waiting] = await interrupts(s, agent_id, run_id)
    assert waiting["id"] == f"{run_id}:UserFillUp:Ask" and waiting["component"] == "UserFillUp:Ask"
    assert waiting["tips"] == "Which city, friend?" and "city" in waiting["form"]
    assert (waiting["status"], waiting["expires_at"]) == ("waiting", None)

    resolve = f"/api/v1/agents/{agent_id}/runs/{run_id}/interrupts/{waiting['id']}/resolve"
    incomplete = await s.client.post(resolve, headers=s.auth(), json={"inputs": {}})
    assert (await incomplete.json())["code"] != 0  # refused, and still open
    resp = await s.client.post(resolve, headers=s.auth(), json={"inputs": {"city": "Lisbon"}})
    body = await resp.json()
    assert resp.status == 200 and body["code"] == 0, body
    assert body["data"]["data"]["content"] == "Going to Lisbon"
    assert (await interrupts(s, agent_id, run_id))[0]["status"] == "answered"

    again = await s.client.post(resolve, headers=s.auth(), json={"inputs": {"city": "Porto"}})
    assert again.status == 409
    assert "answered" in (await again.json())["message"]


async def test_an_expired_interrupt_answers_410(s):
    agent_id, _, run_id = await paused(s, fill_up(timeout_s=0.05, on_timeout="cancel"))
    [waiting] = await interrupts(s, agent_id, run_id)
    assert waiting["expires_at"] and waiting["on_timeout"] == "cancel"
    await eventually(lambda: _status_is(s, agent_id, run_id, "expired"), what="the interrupt's expiry")
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/runs/{run_id}/interrupts/{waiting['id']}/resolve",
                               headers=s.auth(), json={"inputs": {"city": "Lisbon"}})
    assert resp.status == 410
    assert "expired" in (await resp.json())["message"]


async def _status_is(s, agent_id: str, run_id: str, status: str) -> bool:
    return (await interrupts(s, agent_id, run_id))[0]["status"] == status


async def test_the_completion_with_inputs_still_answers_a_pause(s):
    agent_id, session_id, run_id = await paused(s, fill_up())
    body = await s.call("POST", COMPLETIONS, json={
        "agent_id": agent_id, "session_id": session_id, "stream": False,
        "inputs": {"city": {"type": "line", "value": "Lisbon"}}})
    assert body["code"] == 0 and body["data"]["data"]["content"] == "Going to Lisbon", body
    assert (await interrupts(s, agent_id, run_id))[0]["status"] == "answered"


async def run_of(s, agent_id: str, run_id: str) -> dict:
    return (await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}"))["data"]


async def ended(s, agent_id: str, run_id: str) -> dict | None:
    run = await run_of(s, agent_id, run_id)
    return run if run["status"] != "waiting_for_user" else None


async def test_an_expired_wait_with_on_timeout_fail_fails_the_run_and_frees_its_session(s):
    agent_id, session_id, run_id = await paused(s, fill_up(timeout_s=0.05, on_timeout="fail"))
    run = await eventually(lambda: ended(s, agent_id, run_id), what="on_timeout applied")
    assert run["status"] == "failed"
    assert run["error"] == "waited 0.05 s for the user's input to UserFillUp:Ask"
    assert (await interrupts(s, agent_id, run_id))[0]["status"] == "expired"
    body = await s.call("POST", COMPLETIONS, json={"agent_id": agent_id, "session_id": session_id,
                                                   "query": "again", "stream": False})
    assert body["code"] == 0, body  # a new run from the start: the session no longer waits at the old one
    runs = (await s.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs"))["data"]
    assert [r["status"] for r in runs] == ["waiting_for_user", "failed"]


async def test_an_expired_wait_with_on_timeout_cancel_cancels_the_run(s):
    agent_id, session_id, run_id = await paused(s, fill_up(timeout_s=0.05, on_timeout="cancel"))
    run = await eventually(lambda: ended(s, agent_id, run_id), what="on_timeout applied")
    assert run["status"] == "cancelled" and "waited 0.05 s" in run["error"]
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/runs/{run_id}/interrupts/{run_id}:UserFillUp:Ask/resolve",
                               headers=s.auth(), json={"inputs": {"city": "Lisbon"}})
    assert resp.status == 410


async def test_an_expired_wait_with_on_timeout_defaults_resumes_with_the_form_defaults(s):
    dsl = fill_up(timeout_s=0.05, on_timeout="defaults")
    dsl["components"]["UserFillUp:Ask"]["obj"]["params"]["inputs"]["city"]["value"] = "Lisbon"
    agent_id, session_id, run_id = await paused(s, dsl)

    async def resumed() -> dict | None:
        runs = (await s.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_id}/runs"))["data"]
        return runs[0] if runs[0]["id"] != run_id and runs[0]["status"] == "succeeded" else None

    child = await eventually(resumed, what="the run resumed with the defaults")
    assert child["parent_run_id"] == run_id
    assert (await run_of(s, agent_id, run_id))["status"] == "succeeded"  # answered, as a resolve leaves it
    assert (await interrupts(s, agent_id, run_id))[0]["status"] == "expired"
    session = (await s.call("GET", f"/api/v1/agents/{agent_id}/sessions", params={"id": session_id}))["data"][0]
    assert session["messages"][-1]["content"] == "Going to Lisbon"
