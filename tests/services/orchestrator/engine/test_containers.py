"""Iteration and Loop running their child sub-graphs."""
from __future__ import annotations

import pytest

from services.orchestrator.engine.events import NodeFinished, NodeStarted, RunError
from services.orchestrator.engine.settings import EngineSettings
from tests.support.canvas import collect, cpn, of, plan_of
from tests.support.engine_components import TRACE, reset, traced


@pytest.fixture(autouse=True)
def _clean() -> None:
    reset()


def iteration(items: object, child_params: dict | None = None, *, outputs: dict | None = None) -> dict:
    return {
        "begin": cpn("Begin", ["Iteration:It"], {"inputs": {"xs": {"type": "object"}}}),
        "Iteration:It": cpn("Iteration", ["Message:Done"], {
            "items_ref": "begin@xs",
            "outputs": outputs or {"lines": {"ref": "X:Fmt@result", "type": "Array<string>"}}}, ["begin"]),
        "IterationItem:Start": cpn("IterationItem", ["X:Fmt"], parent="Iteration:It"),
        "X:Fmt": cpn("TestEcho", [], child_params or {"text": "{IterationItem:Start@index}:{IterationItem:Start@item}"},
                     ["IterationItem:Start"], parent="Iteration:It"),
        "Message:Done": cpn("Message", [], {"content": ["{Iteration:It@lines}"]}, ["Iteration:It"]),
    }


async def test_iteration_over_five_items_yields_five_results_in_order() -> None:
    events = await collect(plan_of(iteration(None)), inputs={"xs": {"type": "object", "value": list("abcde")}})
    assert of(events, NodeFinished, "Iteration:It")[0].outputs["lines"] == ["0:a", "1:b", "2:c", "3:d", "4:e"]
    assert len(of(events, NodeStarted, "X:Fmt")) == 5
    paths = sorted(e.path for e in of(events, NodeStarted, "X:Fmt"))
    assert paths == [("Iteration:It", str(i)) for i in range(5)]
    assert of(events, NodeFinished, "Message:Done")[0].outputs["content"] == '["0:a", "1:b", "2:c", "3:d", "4:e"]'


async def test_iteration_items_run_concurrently_but_results_keep_item_order() -> None:
    # Earlier items sleep longer, so they finish last; the output must still be in item order.
    comps = iteration(None, {"text": "{item}#{index}", "seconds": "0"})
    comps["X:Fmt"] = cpn("TestSleep", ["X:Tag"], {"seconds": 0.05}, ["IterationItem:Start"], parent="Iteration:It")
    comps["X:Tag"] = cpn("TestEcho", [], {"text": "{item}#{index}"}, ["X:Fmt"], parent="Iteration:It")
    comps["Iteration:It"]["obj"]["params"]["outputs"] = {"tags": {"ref": "X:Tag@result"}}
    comps["Message:Done"]["obj"]["params"]["content"] = ["{Iteration:It@tags}"]
    events = await collect(plan_of(comps), inputs={"xs": {"value": [3, 1, 2, 5]}},
                           settings=EngineSettings(iteration_concurrency=4))
    assert of(events, NodeFinished, "Iteration:It")[0].outputs["tags"] == ["3#0", "1#1", "2#2", "5#3"]
    starts, ends = traced("start", "X:Fmt"), traced("end", "X:Fmt")
    assert max(starts) < min(ends)  # all four waited at the same time


async def test_iteration_concurrency_is_bounded() -> None:
    comps = iteration(None)
    comps["X:Fmt"] = cpn("TestSleep", [], {"seconds": 0.03}, ["IterationItem:Start"], parent="Iteration:It")
    comps["Iteration:It"]["obj"]["params"]["outputs"] = {}
    await collect(plan_of(comps), inputs={"xs": {"value": list(range(6))}},
                  settings=EngineSettings(iteration_concurrency=2))
    marks = sorted([(t, +1) for t in traced("start", "X:Fmt")] + [(t, -1) for t in traced("end", "X:Fmt")],
                   key=lambda m: (m[0], m[1]))
    running = peak = 0
    for _, d in marks:
        running += d
        peak = max(peak, running)
    assert peak == 2 and len(traced("end", "X:Fmt")) == 6


async def test_iteration_over_a_json_string_and_over_nothing() -> None:
    events = await collect(plan_of(iteration(None)), inputs={"xs": {"value": '["p", "q"]'}})
    assert of(events, NodeFinished, "Iteration:It")[0].outputs["lines"] == ["0:p", "1:q"]
    events = await collect(plan_of(iteration(None)), inputs={"xs": {"value": []}}, run_id="run-2")
    assert of(events, NodeFinished, "Iteration:It")[0].outputs["lines"] == []


async def test_iteration_of_a_non_list_fails_naming_items_ref() -> None:
    events = await collect(plan_of(iteration(None)), inputs={"xs": {"value": 42}})
    err = of(events, RunError)[0]
    assert err.component_id == "Iteration:It" and "items_ref 'begin@xs' must be an array" in err.message


async def test_a_failing_child_fails_the_iteration_and_names_the_child() -> None:
    comps = iteration(None)
    comps["X:Fmt"] = cpn("TestFail", [], {"message": "bad item"}, ["IterationItem:Start"], parent="Iteration:It")
    events = await collect(plan_of(comps), inputs={"xs": {"value": [1, 2]}})
    err = of(events, RunError)[0]
    assert err.component_id == "X:Fmt" and "bad item" in err.message
    assert of(events, NodeFinished, "Iteration:It")[0].error == "bad item"


def loop(params: dict, body: dict) -> dict:
    comps = {
        "begin": cpn("Begin", ["Loop:L"]),
        "Loop:L": cpn("Loop", ["X:After"], params, ["begin"]),
        "LoopItem:Start": cpn("LoopItem", list(body)[:1], parent="Loop:L"),
        "X:After": cpn("TestEcho", [], {"text": "count={Loop:L@count}"}, ["Loop:L"]),
    }
    comps.update(body)
    return comps


COUNTER = [{"variable": "count", "input_mode": "constant", "type": "number", "value": 0}]


def incr_body(extra_down: tuple[str, ...] = ()) -> dict:
    return {"X:Inc": cpn("TestIncr", list(extra_down), {"target": "Loop:L@count"}, ["LoopItem:Start"],
                         parent="Loop:L")}


async def test_loop_stops_when_its_termination_condition_holds() -> None:
    params = {"loop_variables": COUNTER, "maximum_loop_count": 50, "logical_operator": "and",
              "loop_termination_condition": [{"variable": "Loop:L@count", "operator": "≥",
                                              "input_mode": "constant", "value": "3"}]}
    events = await collect(plan_of(loop(params, incr_body())))
    assert len(traced("incr", "X:Inc")) == 3
    assert of(events, NodeFinished, "X:After")[0].outputs["result"] == "count=3"


async def test_loop_stops_on_exit_loop() -> None:
    body = incr_body(("Switch:Check",))
    body["Switch:Check"] = cpn("Switch", ["ExitLoop:Out", "X:Again"], {
        "conditions": [{"logical_operator": "and", "to": ["ExitLoop:Out"],
                        "items": [{"cpn_id": "Loop:L@count", "operator": "=", "value": "2"}]}],
        "end_cpn_ids": ["X:Again"]}, ["X:Inc"], parent="Loop:L")
    body["ExitLoop:Out"] = cpn("ExitLoop", [], None, ["Switch:Check"], parent="Loop:L")
    body["X:Again"] = cpn("TestNoop", [], None, ["Switch:Check"], parent="Loop:L")
    events = await collect(plan_of(loop({"loop_variables": COUNTER, "maximum_loop_count": 10}, body)))
    assert len(traced("incr", "X:Inc")) == 2
    assert len(of(events, NodeStarted, "ExitLoop:Out")) == 1 and len(traced("run", "X:Again")) == 1
    assert of(events, NodeFinished, "X:After")[0].outputs["result"] == "count=2"
    assert all(e.path == ("Loop:L",) for e in of(events, NodeStarted, "X:Inc"))


async def test_loop_stops_at_maximum_loop_count_and_zero_ends_immediately() -> None:
    events = await collect(plan_of(loop({"loop_variables": COUNTER, "maximum_loop_count": 4}, incr_body())))
    assert len(traced("incr", "X:Inc")) == 4
    assert of(events, NodeFinished, "X:After")[0].outputs["result"] == "count=4"
    TRACE.clear()
    events = await collect(plan_of(loop({"loop_variables": COUNTER, "maximum_loop_count": 0}, incr_body())),
                           run_id="run-2")
    assert traced("incr", "X:Inc") == [] and not of(events, NodeStarted, "X:Inc")
    assert of(events, NodeFinished, "X:After")[0].outputs["result"] == "count=0"


async def test_loop_variable_from_another_variable_and_or_conditions() -> None:
    params = {"loop_variables": [{"variable": "count", "input_mode": "variable", "type": "number",
                                  "value": "env.start"}],
              "maximum_loop_count": 50, "logical_operator": "or",
              "loop_termination_condition": [
                  {"variable": "Loop:L@count", "operator": "=", "input_mode": "variable", "value": "env.stop"},
                  {"variable": "Loop:L@count", "operator": ">", "input_mode": "constant", "value": "100"}]}
    comps = loop(params, incr_body())
    plan = plan_of(comps, variables={"start": {"type": "number", "value": 5}, "stop": {"type": "number", "value": 7}})
    events = await collect(plan)
    assert len(traced("incr", "X:Inc")) == 2
    assert of(events, NodeFinished, "X:After")[0].outputs["result"] == "count=7"


async def test_an_iteration_inside_a_loop_nests_paths_and_scopes() -> None:
    comps = loop({"loop_variables": COUNTER, "maximum_loop_count": 2}, {
        "X:Inc": cpn("TestIncr", ["Iteration:In"], {"target": "Loop:L@count"}, ["LoopItem:Start"], parent="Loop:L"),
        "Iteration:In": cpn("Iteration", [], {"items_ref": "env.xs", "outputs": {"r": {"ref": "X:Each@result"}}},
                            ["X:Inc"], parent="Loop:L"),
        "IterationItem:Each": cpn("IterationItem", ["X:Each"], parent="Iteration:In"),
        "X:Each": cpn("TestEcho", [], {"text": "{Loop:L@count}/{item}"}, ["IterationItem:Each"], parent="Iteration:In"),
    })
    plan = plan_of(comps, variables={"xs": {"type": "array<string>", "value": ["a", "b"]}})
    events = await collect(plan)
    assert [e.outputs["r"] for e in of(events, NodeFinished, "Iteration:In")] == [["1/a", "1/b"], ["2/a", "2/b"]]
    assert {e.path for e in of(events, NodeStarted, "X:Each")} == {("Loop:L", "Iteration:In", "0"),
                                                                  ("Loop:L", "Iteration:In", "1")}
