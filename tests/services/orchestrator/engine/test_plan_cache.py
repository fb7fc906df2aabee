"""The checked, compiled plan is cached per (tenant, agent, version) and never outlives the DSL text it came from."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.common.errors import InvalidArgument
from services.orchestrator.engine import canvases
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


async def test_runs_that_ask_for_the_same_plan_at_once_share_one_compile(monkeypatch):
    compiles = []
    real = canvases.parse

    def counted(*args, **kwargs):
        compiles.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(canvases, "parse", counted)
    plans = await asyncio.gather(*(canvases.compiled_plan("t-herd", "agent-h", "v1", _dsl("one")) for _ in range(20)))
    assert len(compiles) == 1 and all(p is plans[0] for p in plans)
    assert await canvases.compiled_plan("t-herd", "agent-h", "v1", _dsl("one")) is plans[0]  # kept
    assert len(compiles) == 1


async def test_a_caller_that_leaves_does_not_stop_the_compile_the_others_wait_for():
    first = asyncio.ensure_future(canvases.compiled_plan("t-herd", "agent-c", "v1", _dsl("one")))
    second = asyncio.ensure_future(canvases.compiled_plan("t-herd", "agent-c", "v1", _dsl("one")))
    await asyncio.sleep(0)
    first.cancel()
    plan = await second
    assert plan.canvas.components["Message:m"].params["content"] == ["one"]
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_every_caller_of_a_broken_dsl_gets_the_error_and_nothing_is_kept():
    broken = json.dumps({"components": {"begin": {"obj": {"component_name": "Begin", "params": {}},
                                                  "downstream": ["Nope:x"], "upstream": []}}})
    results = await asyncio.gather(*(canvases.compiled_plan("t-herd", "agent-b", "v1", broken) for _ in range(3)),
                                   return_exceptions=True)
    assert all(isinstance(r, InvalidArgument) and "Nope:x" in str(r) for r in results)
    assert ("t-herd", "agent-b", "v1") not in canvases._plans
