"""Per-component error handling: retries, comment, goto, timeout, and how a failing run ends."""
from __future__ import annotations

import pytest

from services.orchestrator.engine.events import MessageDelta, NodeFinished, NodeStarted, RunError, RunFinished
from services.orchestrator.engine.settings import EngineSettings
from tests.support.canvas import collect, cpn, index, of, plan_of
from tests.support.engine_components import reset, traced


@pytest.fixture(autouse=True)
def _clean() -> None:
    reset()


def failing(params: dict, after: tuple[str, ...] = ("N:Next",), extra: dict | None = None) -> dict:
    comps = {
        "begin": cpn("Begin", ["F:Flaky"]),
        "F:Flaky": cpn("TestFail", list(after), params, ["begin"]),
        "N:Next": cpn("TestEcho", [], {"text": "after {F:Flaky@result}"}, ["F:Flaky"]),
    }
    comps.update(extra or {})
    return comps


async def test_retry_succeeds_on_the_second_attempt() -> None:
    events = await collect(plan_of(failing({"fail_times": 1, "max_retries": 2, "delay_after_error": 0.01})))
    assert len(traced("attempt", "F:Flaky")) == 2
    assert len(of(events, NodeStarted, "F:Flaky")) == 1  # one node, two attempts inside it
    fin = of(events, NodeFinished, "F:Flaky")[0]
    assert fin.error is None and fin.outputs["result"] == "ok"
    assert of(events, NodeFinished, "N:Next")[0].outputs["result"] == "after ok"
    assert not of(events, RunError) and events[-1].error is None


async def test_retries_wait_delay_after_error_between_attempts() -> None:
    await collect(plan_of(failing({"fail_times": 2, "max_retries": 2, "delay_after_error": 0.1})))
    t = traced("attempt", "F:Flaky")
    assert len(t) == 3 and t[1] - t[0] >= 0.09 and t[2] - t[1] >= 0.09


async def test_a_failing_run_ends_with_an_error_event_then_run_finished() -> None:
    events = await collect(plan_of(failing({"message": "database is down", "max_retries": 1,
                                            "delay_after_error": 0})))
    assert len(traced("attempt", "F:Flaky")) == 2
    err = of(events, RunError)[0]
    assert (err.component_id, err.code) == ("F:Flaky", "component_failed")
    assert "database is down" in err.message
    assert isinstance(events[-1], RunFinished) and events[-2] is err
    assert "F:Flaky" in events[-1].error and "database is down" in events[-1].error
    assert of(events, NodeFinished, "F:Flaky")[0].error == "database is down"
    assert not of(events, NodeStarted, "N:Next")


async def test_exception_comment_uses_the_default_value_and_goes_on() -> None:
    events = await collect(plan_of(failing({"exception_method": "comment",
                                            "exception_default_value": "fallback"})))
    fin = of(events, NodeFinished, "F:Flaky")[0]
    assert fin.outputs["result"] == "fallback" and fin.outputs["_ERROR"] == "boom"
    assert [d.content for d in of(events, MessageDelta, "F:Flaky")] == ["fallback"]
    assert of(events, NodeFinished, "N:Next")[0].outputs["result"] == "after fallback"
    assert not of(events, RunError) and events[-1].error is None


async def test_goto_reroutes_and_suppresses_the_normal_downstream() -> None:
    extra = {"N:Rescue": cpn("TestEcho", ["N:End"], {"text": "rescued: {F:Flaky@_ERROR}"}, ["F:Flaky"]),
             "N:End": cpn("TestNoop", [], None, ["N:Next", "N:Rescue"])}
    comps = failing({"exception_method": "goto", "exception_goto": ["N:Rescue"]}, ("N:Next",), extra)
    comps["N:Next"]["downstream"] = ["N:End"]
    events = await collect(plan_of(comps))
    assert not of(events, NodeStarted, "N:Next")
    assert of(events, NodeFinished, "N:Next")[0].skipped
    assert of(events, NodeFinished, "N:Rescue")[0].outputs["result"] == "rescued: boom"
    assert len(of(events, NodeStarted, "N:End")) == 1
    assert not of(events, RunError)


async def test_goto_target_is_skipped_when_the_component_succeeds() -> None:
    extra = {"N:Rescue": cpn("TestNoop", [], None, [])}
    comps = failing({"fail_times": 0, "exception_method": "goto", "exception_goto": ["N:Rescue"]}, ("N:Next",), extra)
    events = await collect(plan_of(comps))
    assert of(events, NodeStarted, "N:Next") and not of(events, NodeStarted, "N:Rescue")
    assert of(events, NodeFinished, "N:Rescue")[0].skipped


async def test_timeout_applies_per_component_and_is_configurable() -> None:
    comps = {"begin": cpn("Begin", ["S:Slow"]), "S:Slow": cpn("TestSleep", [], {"seconds": 60}, ["begin"])}
    settings = EngineSettings(component_timeouts={"TestSleep": 0.05})
    events = await collect(plan_of(comps), settings=settings)
    err = of(events, RunError)[0]
    assert (err.component_id, err.code) == ("S:Slow", "timeout")
    assert "timed out after 0.05 s" in err.message
    assert traced("cancelled", "S:Slow")
    assert events[-1].elapsed_s < 30  # ended at the limit, not after the 60 s sleep


async def test_a_timeout_can_be_retried_and_only_hits_the_slow_node() -> None:
    comps = {"begin": cpn("Begin", ["S:Slow", "S:Ok"]),
             "S:Slow": cpn("TestSleep", [], {"seconds": 5, "max_retries": 1, "delay_after_error": 0,
                                              "exception_method": "comment", "exception_default_value": "late"},
                           ["begin"]),
             "S:Ok": cpn("TestEcho", [], {"text": "fine", "seconds": 0.01}, ["begin"])}
    events = await collect(plan_of(comps), settings=EngineSettings(component_timeouts={"TestSleep": 0.05}))
    assert len(traced("cancelled", "S:Slow")) == 2  # first attempt and its retry
    assert of(events, NodeFinished, "S:Slow")[0].outputs["result"] == "late"
    assert of(events, NodeFinished, "S:Ok")[0].outputs["result"] == "fine"
    assert events[-1].error is None


async def test_a_failure_cancels_the_other_running_branches() -> None:
    comps = {"begin": cpn("Begin", ["S:Wait", "S:Long"]),
             "S:Wait": cpn("TestSleep", ["F:Bad"], {"seconds": 0.05}, ["begin"]),
             "F:Bad": cpn("TestFail", [], None, ["S:Wait"]),
             "S:Long": cpn("TestSleep", [], {"seconds": 60}, ["begin"])}
    events = await collect(plan_of(comps))
    assert traced("cancelled", "S:Long")
    assert of(events, RunError)[0].component_id == "F:Bad"
    assert index(events, RunError, "F:Bad") == len(events) - 2
    assert events[-1].elapsed_s < 30  # the failure ended the run, not the 60 s sibling


async def test_a_failure_before_a_sibling_started_still_ends_the_run() -> None:
    comps = {"begin": cpn("Begin", ["F:Bad", "S:Long"]),
             "F:Bad": cpn("TestFail", [], None, ["begin"]),
             "S:Long": cpn("TestSleep", [], {"seconds": 30}, ["begin"])}
    events = await collect(plan_of(comps))
    assert of(events, RunError)[0].component_id == "F:Bad" and events[-1].error
