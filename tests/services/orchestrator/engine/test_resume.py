"""Checkpoints and resume in the engine: a replayed component never runs again, and the run ends exactly as
an uninterrupted one would; UserFillUp pauses a run and a later run resumes there."""
from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.engine.checkpoint import NodeRecord, Replay
from services.orchestrator.engine.events import NodeFinished, NodeStarted, RunFinished, UserInputRequired
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest, SessionState
from tests.support.canvas import cpn, of, plan_of
from tests.support.engine_components import TRACE, reset, traced


@pytest.fixture(autouse=True)
def _clean() -> None:
    reset()


async def run_collect(plan: Any, *, replay: Replay | None = None, inputs: dict | None = None,
                      state: SessionState | None = None) -> tuple[list[Any], list[NodeRecord]]:
    """Events and checkpoint records of one run; records go through JSON as they would through Redis."""
    events: list[Any] = []
    records: list[NodeRecord] = []
    request = RunRequest(run_id="r", session_id="s", query="q", inputs=inputs or {})
    async for ev in run(plan, request, state, Services(settings=EngineSettings()), replay=replay, checkpoints=True):
        if isinstance(ev, NodeRecord):
            records.append(NodeRecord.from_json(ev.to_json()))
        else:
            events.append(ev)
    assert isinstance(events[-1], RunFinished)
    return events, records


def branching_loop_canvas() -> dict:
    """Begin -> Switch (one branch pruned) -> Loop of three increments -> Iteration over two items -> echo."""
    return {
        "begin": cpn("Begin", ["Switch:S"]),
        "Switch:S": cpn("Switch", ["X:Yes", "X:No"], {
            "conditions": [{"logical_operator": "and", "to": ["X:Yes"],
                            "items": [{"cpn_id": "sys.query", "operator": "=", "value": "q"}]}],
            "end_cpn_ids": ["X:No"]}, ["begin"]),
        "X:Yes": cpn("TestNoop", ["Loop:L"], {"value": "yes"}, ["Switch:S"]),
        "X:No": cpn("TestNoop", ["Loop:L"], {"value": "no"}, ["Switch:S"]),
        "Loop:L": cpn("Loop", ["Iteration:It"], {
            "loop_variables": [{"variable": "count", "input_mode": "constant", "value": 0, "type": "number"}],
            "maximum_loop_count": 3}, ["X:Yes", "X:No"]),
        "LoopItem:Start": cpn("LoopItem", ["X:Inc"], parent="Loop:L"),
        "X:Inc": cpn("TestIncr", [], {"target": "Loop:L@count"}, ["LoopItem:Start"], parent="Loop:L"),
        "Iteration:It": cpn("Iteration", ["X:End"], {
            "items_ref": "X:List@result", "outputs": {"got": {"ref": "X:Item@result"}}}, ["Loop:L"]),
        "IterationItem:Start": cpn("IterationItem", ["X:Item"], parent="Iteration:It"),
        "X:Item": cpn("TestEcho", [], {"text": "{IterationItem:Start@item}-{Loop:L@count}"},
                      ["IterationItem:Start"], parent="Iteration:It"),
        "X:End": cpn("TestEcho", [], {"text": "{X:Yes@result} {Iteration:It@got} {env.seen}"}, ["Iteration:It"]),
        "X:List": cpn("TestNoop", ["Iteration:It"], {"value": ["a", "b"]}, ["begin"]),
    }


def final_text(events: list[Any]) -> str:
    return of(events, NodeFinished, "X:End")[-1].outputs["result"]


async def test_a_full_replay_runs_nothing_again_and_ends_the_same() -> None:
    plan = plan_of(branching_loop_canvas(), variables={"seen": {"type": "string", "value": "v"}})
    events, records = await run_collect(plan)
    expected = final_text(events)
    assert expected == 'yes ["a-3", "b-3"] v'
    assert len(traced("incr", "X:Inc")) == 3
    assert any(r.skipped and r.node_id == "X:No" for r in records)
    assert [r.route for r in records if r.node_id == "Switch:S"] == [["X:Yes"]]

    reset()
    replayed, more = await run_collect(plan, replay=Replay(records))
    assert TRACE == []  # no test component ran
    assert more == []  # nothing new to checkpoint
    assert of(replayed, NodeStarted) == [] and of(replayed, NodeFinished) == []
    assert replayed[-1].outputs["result"] == expected and replayed[-1].error is None


@pytest.mark.parametrize("finished", [1, 3, 6, 9])
async def test_resuming_after_any_prefix_runs_only_what_did_not_finish(finished: int) -> None:
    plan = plan_of(branching_loop_canvas())
    events, records = await run_collect(plan)
    expected = final_text(events)
    done = records[:finished]
    reset()
    resumed, rest = await run_collect(plan, replay=Replay(done))
    ran = {c for what, c, _ in TRACE if what in ("run", "incr")}
    restored = {r.node_id for r in done if not r.skipped and not r.path}
    assert not (ran & restored), "a restored top-level component ran again"
    # Every Loop pass still happened exactly once in total: restored passes plus the ones that ran now.
    passes_restored = sum(1 for r in done if r.node_id == "X:Inc")
    assert passes_restored + len(traced("incr", "X:Inc")) == 3
    assert final_text(resumed) == expected
    assert len(done) + len(rest) == len(records)  # the two attempts checkpoint every component once


def fill_up_canvas(inside_loop: bool = False) -> dict:
    form = {"answer": {"name": "answer", "type": "line", "optional": False, "options": []},
            "note": {"name": "note", "type": "paragraph", "optional": True, "options": []}}
    if not inside_loop:
        return {
            "begin": cpn("Begin", ["X:Plan"]),
            "X:Plan": cpn("TestNoop", ["UserFillUp:Ask"], {"value": "the plan"}, ["begin"]),
            "UserFillUp:Ask": cpn("UserFillUp", ["X:After"], {"enable_tips": True, "inputs": form,
                                                              "tips": "Plan: {X:Plan@result}. OK?"}, ["X:Plan"]),
            "X:After": cpn("TestEcho", [], {"text": "{UserFillUp:Ask@answer}|{UserFillUp:Ask@note}"},
                           ["UserFillUp:Ask"]),
        }
    return {
        "begin": cpn("Begin", ["Loop:L"]),
        "Loop:L": cpn("Loop", ["X:After"], {
            "loop_variables": [{"variable": "count", "input_mode": "constant", "value": 0, "type": "number"}],
            "maximum_loop_count": 2}, ["begin"]),
        "LoopItem:Start": cpn("LoopItem", ["UserFillUp:Ask"], parent="Loop:L"),
        "UserFillUp:Ask": cpn("UserFillUp", ["X:Inc"], {"inputs": form, "tips": "pass {Loop:L@count}"},
                              ["LoopItem:Start"], parent="Loop:L"),
        "X:Inc": cpn("TestIncr", [], {"target": "Loop:L@count"}, ["UserFillUp:Ask"], parent="Loop:L"),
        "X:After": cpn("TestEcho", [], {"text": "count={Loop:L@count}"}, ["Loop:L"]),
    }


async def test_user_fill_up_pauses_the_run_and_a_later_run_resumes_there() -> None:
    plan = plan_of(fill_up_canvas())
    events, records = await run_collect(plan)
    assert events[-1].waiting_for_user and events[-1].error is None
    asked = of(events, UserInputRequired, "UserFillUp:Ask")
    assert len(asked) == 1 and asked[0].tips == "Plan: the plan. OK?"
    assert set(asked[0].inputs) == {"answer", "note"}
    assert of(events, NodeFinished, "UserFillUp:Ask") == [] and traced("run", "X:After") == []

    reset()
    replay = Replay(records, resume_inputs={"UserFillUp:Ask": {"answer": {"type": "line", "value": "yes"}}})
    resumed, _ = await run_collect(plan, replay=replay)
    assert traced("run", "X:Plan") == []  # finished before the pause: not run again
    assert not resumed[-1].waiting_for_user
    assert of(resumed, NodeFinished, "X:After")[0].outputs["result"] == "yes|"
    assert of(resumed, NodeFinished, "UserFillUp:Ask")[0].outputs["tips"] == "Plan: the plan. OK?"


async def test_user_fill_up_inside_a_loop_pauses_on_every_pass() -> None:
    plan = plan_of(fill_up_canvas(inside_loop=True))
    events, records = await run_collect(plan)
    assert events[-1].waiting_for_user
    assert of(events, UserInputRequired)[0].tips == "pass 0"
    all_records = list(records)
    for n, answer in enumerate(["first", "second"]):
        replay = Replay(all_records, resume_inputs={"Loop:L/UserFillUp:Ask": {"answer": answer}})
        events, records = await run_collect(plan, replay=replay)
        all_records += records
        if n == 0:
            assert events[-1].waiting_for_user
            assert of(events, UserInputRequired)[0].tips == "pass 1"
    assert not events[-1].waiting_for_user
    assert of(events, NodeFinished, "X:After")[0].outputs["result"] == "count=2"
    assert [e.outputs["answer"] for e in of(events, NodeFinished, "UserFillUp:Ask")] == ["second"]
