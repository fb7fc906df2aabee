"""Dataflow scheduling: joins, overlap, no batch barrier, pruning, event order, streams, cancellation."""
from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from services.orchestrator.engine.events import (
    MessageDelta,
    MessageEnd,
    NodeFinished,
    NodeStarted,
    RunError,
    RunFinished,
    RunStarted,
)
from services.orchestrator.engine.runner import run, start
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest, SessionState
from tests.support.canvas import collect, cpn, index, of, plan_of
from tests.support.engine_components import TRACE, reset, traced
from tests.support.waiting import eventually


@pytest.fixture(autouse=True)
def _clean() -> None:
    reset()


def diamond(a: str = "TestNoop", b: str = "TestNoop", params_a=None, params_b=None) -> dict:
    return {
        "begin": cpn("Begin", ["X:A", "X:B"]),
        "X:A": cpn(a, ["X:J"], params_a, ["begin"]),
        "X:B": cpn(b, ["X:J"], params_b, ["begin"]),
        "X:J": cpn("TestEcho", [], {"text": "{X:A@result}+{X:B@result}"}, ["X:A", "X:B"]),
    }


async def test_diamond_join_runs_once_after_both_branches() -> None:
    events = await collect(plan_of(diamond()))
    assert len(of(events, NodeStarted, "X:J")) == 1
    assert len(of(events, NodeFinished, "X:J")) == 1
    j = index(events, NodeStarted, "X:J")
    assert index(events, NodeFinished, "X:A") < j and index(events, NodeFinished, "X:B") < j
    assert of(events, NodeFinished, "X:J")[0].outputs["result"] == "X:A+X:B"


async def test_two_slow_branches_overlap_in_time() -> None:
    plan = plan_of(diamond("TestSleep", "TestSleep", {"seconds": 0.2}, {"seconds": 0.2}))
    events = await collect(plan)
    assert not of(events, RunError)
    (a0,), (a1,) = traced("start", "X:A"), traced("end", "X:A")
    (b0,), (b1,) = traced("start", "X:B"), traced("end", "X:B")
    assert b0 < a1 and a0 < b1  # both were running at the same time, not one after the other


async def test_no_batch_barrier_a_fast_branch_goes_on_while_a_slow_one_runs() -> None:
    comps = {
        "begin": cpn("Begin", ["S:Slow", "F:One"]),
        "S:Slow": cpn("TestSleep", [], {"seconds": 2}, ["begin"]),  # far longer than three tiny steps anywhere
        "F:One": cpn("TestSleep", ["F:Two"], {"seconds": 0.01}, ["begin"]),
        "F:Two": cpn("TestSleep", ["F:Three"], {"seconds": 0.01}, ["F:One"]),
        "F:Three": cpn("TestSleep", [], {"seconds": 0.01}, ["F:Two"]),
    }
    await collect(plan_of(comps))
    assert traced("end", "F:Three")[0] < traced("end", "S:Slow")[0]


def switch_canvas(value: str) -> dict:
    return {
        "begin": cpn("Begin", ["Switch:S"], {"inputs": {"x": {"type": "line"}}}),
        "Switch:S": cpn("Switch", ["N:Yes", "N:No"], {
            "conditions": [{"logical_operator": "and", "to": ["N:Yes"],
                            "items": [{"cpn_id": "begin@x", "operator": "=", "value": "yes"}]}],
            "end_cpn_ids": ["N:No"]}, ["begin"]),
        "N:Yes": cpn("TestNoop", ["N:Join"], None, ["Switch:S"]),
        "N:No": cpn("TestNoop", ["N:After", "N:Join"], None, ["Switch:S"]),
        "N:After": cpn("TestNoop", [], None, ["N:No"]),
        "N:Join": cpn("TestNoop", [], None, ["N:Yes", "N:No"]),
    }


async def test_pruned_branch_never_runs_and_pruning_propagates() -> None:
    events = await collect(plan_of(switch_canvas("yes")), inputs={"x": {"value": "yes"}})
    started = {e.node_id for e in of(events, NodeStarted)}
    assert "N:No" not in started and "N:After" not in started
    assert [w for w, c, _ in TRACE if c in ("N:No", "N:After")] == []
    skipped = {e.node_id for e in of(events, NodeFinished) if e.skipped}
    assert skipped == {"N:No", "N:After"}
    assert len(of(events, NodeStarted, "N:Join")) == 1  # a join after a branch still runs, once
    assert of(events, NodeFinished, "Switch:S")[0].outputs["_next"] == ["N:Yes"]


async def test_the_else_branch_is_taken_otherwise() -> None:
    events = await collect(plan_of(switch_canvas("no")), inputs={"x": {"value": "nope"}})
    started = [e.node_id for e in of(events, NodeStarted)]
    assert "N:Yes" not in started and {"N:No", "N:After", "N:Join"} <= set(started)


async def test_event_order_a_client_can_rely_on() -> None:
    comps = {
        "begin": cpn("Begin", ["Message:M"]),
        "Message:M": cpn("Message", [], {"content": ["Hello {sys.query}!"]}, ["begin"]),
    }
    events = await collect(plan_of(comps), query="world")
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    s, d, e, f = (index(events, c, "Message:M") for c in (NodeStarted, MessageDelta, MessageEnd, NodeFinished))
    assert s < d < e < f
    assert "".join(x.content for x in of(events, MessageDelta)) == "Hello world!"
    assert events[-1].error is None and events[-1].outputs["content"] == "Hello world!"
    assert all(ev.run_id == "run-1" and ev.session_id == "s-1" for ev in events)


async def test_a_stream_is_forwarded_live_and_later_readers_get_the_full_text() -> None:
    comps = {
        "begin": cpn("Begin", ["LLM:Fake"]),
        "LLM:Fake": cpn("TestStream", ["Message:Live"], {"tokens": ["a", "b", "c", "d"], "gap": 0.03}, ["begin"]),
        "Message:Live": cpn("Message", ["X:Later"], {"content": ["<{LLM:Fake@content}>"]}, ["LLM:Fake"]),
        "X:Later": cpn("TestEcho", [], {"text": "got {LLM:Fake@content}"}, ["Message:Live"]),
    }
    events = await collect(plan_of(comps))
    deltas = [e.content for e in of(events, MessageDelta, "Message:Live")]
    assert deltas == ["<", "a", "b", "c", "d", ">"]  # token by token, not one blob
    # The first token reached the client before the producer had finished.
    assert index(events, MessageDelta, "Message:Live") + 1 < index(events, NodeFinished, "LLM:Fake")
    assert of(events, NodeFinished, "LLM:Fake")[0].outputs["content"] == "abcd"
    assert of(events, NodeFinished, "X:Later")[0].outputs["result"] == "got abcd"


async def test_a_stream_that_breaks_fails_the_run_naming_the_producer() -> None:
    comps = {
        "begin": cpn("Begin", ["LLM:Fake"]),
        "LLM:Fake": cpn("TestStream", ["Message:Live"], {"tokens": ["a"], "gap": 0.01, "fail_at_end": True}, ["begin"]),
        "Message:Live": cpn("Message", [], {"content": ["{LLM:Fake@content}"]}, ["LLM:Fake"]),
    }
    events = await collect(plan_of(comps))
    err = of(events, RunError)[0]
    assert err.component_id in ("LLM:Fake", "Message:Live") and "stream broke" in err.message
    assert events[-1].error and "stream broke" in events[-1].error


async def test_closing_the_stream_cancels_running_components() -> None:
    comps = {"begin": cpn("Begin", ["S:Long"]), "S:Long": cpn("TestSleep", [], {"seconds": 30}, ["begin"])}
    gen = run(plan_of(comps), RunRequest(run_id="r"), SessionState(), Services())
    async for ev in gen:
        if isinstance(ev, NodeStarted) and ev.node_id == "S:Long":
            break
    await eventually(lambda: traced("start", "S:Long"), what="S:Long running")  # so there is a run to cancel
    await gen.aclose()
    assert traced("cancelled", "S:Long")


async def test_cancel_ends_the_run_with_explicit_events() -> None:
    comps = {"begin": cpn("Begin", ["S:Long"]), "S:Long": cpn("TestSleep", [], {"seconds": 30}, ["begin"])}
    running = start(plan_of(comps), RunRequest(run_id="r"), SessionState(), Services())
    events = []
    async with aclosing(running.batches()) as batches:
        async for batch in batches:
            events.extend(batch)
            if any(isinstance(ev, NodeStarted) and ev.node_id == "S:Long" for ev in batch):
                running.cancel()
    assert traced("cancelled", "S:Long")
    assert not of(events, RunError)  # a cancel is not an error; RunFinished says it
    assert events[-1].cancelled is True and events[-1].error == "Task has been canceled"


async def test_a_run_cancelled_before_it_starts_still_ends_itself() -> None:
    comps = {"begin": cpn("Begin", ["S:Long"]), "S:Long": cpn("TestSleep", [], {"seconds": 30}, ["begin"])}
    running = start(plan_of(comps), RunRequest(run_id="r"), SessionState(), Services())
    running.cancel()
    async with aclosing(running.batches()) as batches:
        events = [ev async for batch in batches for ev in batch]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished) and events[-1].cancelled
    assert not of(events, NodeFinished, "S:Long")


async def test_runs_in_one_process_do_not_hold_each_other_up() -> None:
    slow = plan_of({"begin": cpn("Begin", ["S:Slow"]), "S:Slow": cpn("TestSleep", [], {"seconds": 2}, ["begin"])})
    fast = plan_of({"begin": cpn("Begin", ["F:Fast"]), "F:Fast": cpn("TestSleep", [], {"seconds": 0.01}, ["begin"])})
    await asyncio.gather(collect(slow, run_id="slow"), collect(fast, run_id="fast"))
    assert traced("end", "F:Fast")[0] < traced("end", "S:Slow")[0]


async def test_max_steps_stops_a_runaway_run_with_a_clear_error() -> None:
    comps = {"begin": cpn("Begin", ["L:Loop"]),
             "L:Loop": cpn("Loop", [], {"maximum_loop_count": 100}, ["begin"]),
             "LoopItem:Start": cpn("LoopItem", ["N:Body"], parent="L:Loop"),
             "N:Body": cpn("TestNoop", [], None, ["LoopItem:Start"], parent="L:Loop")}
    events = await collect(plan_of(comps), settings=EngineSettings(max_steps=20))
    err = of(events, RunError)[0]
    assert err.code == "max_steps" and "max_steps=20" in err.message


async def test_session_state_records_the_turn() -> None:
    comps = {"begin": cpn("Begin", ["Message:M"]),
             "Message:M": cpn("Message", [], {"content": ["hi {sys.query}"]}, ["begin"])}
    state = SessionState.fresh({"n": {"type": "number", "value": 2}})
    await collect(plan_of(comps), query="bob", state=state)
    await collect(plan_of(comps), query="amy", state=state, run_id="run-2")
    assert state.globals["sys.conversation_turns"] == 2 and state.globals["env.n"] == 2
    assert state.history[-2:] == [["user", "amy"], ["assistant", "hi amy"]]
    assert state.path == ["begin", "Message:M", "begin", "Message:M"]


async def test_usage_reported_by_components_is_summed_in_run_finished() -> None:
    from services.orchestrator.components.base import Component, register

    @register
    class TestUsage(Component):
        component_name = "TestUsage"

        async def run(self, ctx):
            ctx.add_usage(prompt_tokens=3, completion_tokens=2, calls=1)

    comps = {"begin": cpn("Begin", ["U:A", "U:B"]), "U:A": cpn("TestUsage", [], None, ["begin"]),
             "U:B": cpn("TestUsage", [], None, ["begin"])}
    events = await collect(plan_of(comps))
    assert events[-1].usage == {"prompt_tokens": 6, "completion_tokens": 4, "calls": 2}


async def test_events_built_on_the_hot_path_equal_their_dataclass_form() -> None:
    import dataclasses
    comps = {"begin": cpn("Begin", ["Switch:S"]),
             "Switch:S": cpn("Switch", ["N:A", "N:B"], {"conditions": [{"items": [], "to": ["N:A"]}],
                                                       "end_cpn_ids": ["N:B"]}, ["begin"]),
             "N:A": cpn("TestNoop", [], None, ["Switch:S"]), "N:B": cpn("TestNoop", [], None, ["Switch:S"])}
    events = await collect(plan_of(comps))
    for ev in events:
        names = {f.name for f in dataclasses.fields(ev)}
        assert set(vars(ev)) == names, type(ev).__name__
        assert ev == type(ev)(**vars(ev))
        with pytest.raises(dataclasses.FrozenInstanceError):
            ev.node_id = "x"
