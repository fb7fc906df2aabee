"""The checked, compiled plan is cached per (tenant, agent, version) and never outlives the DSL text it came from."""

from __future__ import annotations

import json

from services.orchestrator import canvases
from tests.support.pipeline import HEADERS, create_agent, echo_canvas, pipeline


def _dsl(answer: str) -> str:
    dsl = echo_canvas()
    dsl["components"]["Message:m"]["obj"]["params"]["content"] = [answer]
    return json.dumps(dsl)


async def test_same_text_reuses_the_plan_and_changed_text_recompiles():
    first = await canvases.compiled_plan("t-cache", "agent-1", "", _dsl("one"))
    assert await canvases.compiled_plan("t-cache", "agent-1", "", _dsl("one")) is first
    edited = await canvases.compiled_plan("t-cache", "agent-1", "", _dsl("two"))
    assert edited is not first
    assert edited.canvas.components["Message:m"].params["content"] == ["two"]
    # another version, tenant or inline DSL never shares an entry
    assert await canvases.compiled_plan("t-cache", "agent-1", "v1", _dsl("two")) is not edited
    assert await canvases.compiled_plan("t-other", "agent-1", "", _dsl("two")) is not edited
    assert await canvases.compiled_plan("t-cache", "", "", _dsl("two")) is not await canvases.compiled_plan(
        "t-cache", "", "", _dsl("two"))


async def test_a_new_session_reads_its_prologue_from_the_cached_plan():
    plan = await canvases.compiled_plan("t-cache", "agent-2", "v1", _dsl("one"))
    assert canvases.session_canvas("t-cache", "agent-2", "v1", _dsl("one")) is plan.canvas
    fresh = canvases.session_canvas("t-cache", "agent-2", "v1", _dsl("changed"))  # not what was compiled
    assert fresh is not plan.canvas and fresh.components["Message:m"].params["content"] == ["changed"]


async def test_an_edited_draft_answers_with_the_new_canvas(redis_server):
    async with pipeline(redis_server.url) as p:
        agent_id = await create_agent(p.client, echo_canvas())

        async def ask() -> str:
            body = {"model": agent_id, "messages": [{"role": "user", "content": "hi"}]}
            resp = await (await p.client.post("/v1/chat/completions", headers=HEADERS, json=body)).json()
            return resp["choices"][0]["message"]["content"]

        assert await ask() == "You said: hi"
        assert await ask() == "You said: hi"  # served from the cached plan
        updated = await p.client.put(f"/api/v1/agents/{agent_id}", headers=HEADERS,
                                     json={"dsl": json.loads(_dsl("Edited: {sys.query}"))})
        assert (await updated.json())["code"] == 0
        assert await ask() == "Edited: hi"
