"""The engine's spans (services/orchestrator/engine/tracing.py): a run span, a span per component under it (or under
its Iteration), retries and failures recorded; and none of it when tracing is off."""
from __future__ import annotations

from contextlib import aclosing

import pytest
from opentelemetry.trace import StatusCode

from services.common import tracing
from services.orchestrator.engine.events import RunFinished
from services.orchestrator.engine.runner import start
from services.orchestrator.engine.state import RunRequest
from tests.support.canvas import collect, cpn, plan_of
from tests.support.engine_components import reset


@pytest.fixture(autouse=True)
def _reset():
    reset()


def _canvas(flaky: dict) -> dict:
    return {
        "begin": cpn("Begin", ["Iteration:It"], {"inputs": {"xs": {"type": "object"}}}),
        "Iteration:It": cpn("Iteration", ["F:Flaky"], {
            "items_ref": "begin@xs", "outputs": {"lines": {"ref": "X:Fmt@result", "type": "Array<string>"}}}, ["begin"]),
        "IterationItem:Start": cpn("IterationItem", ["X:Fmt"], parent="Iteration:It"),
        "X:Fmt": cpn("TestEcho", [], {"text": "{IterationItem:Start@item}"}, ["IterationItem:Start"], parent="Iteration:It"),
        "F:Flaky": cpn("TestFail", [], flaky, ["Iteration:It"]),
    }


def _by_name(exporter):
    finished = exporter.get_finished_spans()
    return finished, {s.context.span_id: s for s in finished}


async def test_run_and_component_spans_nest_like_the_canvas(spans):
    plan = plan_of(_canvas({"fail_times": 1, "max_retries": 2, "delay_after_error": 0}))
    events = await collect(plan, inputs={"xs": {"type": "object", "value": ["a", "b", "c"]}})
    assert events[-1].error is None
    finished, by_id = _by_name(spans)
    [run_span] = [s for s in finished if s.name == "run"]
    assert run_span.parent is None and run_span.attributes["trellis.run.id"] == "run-1"
    assert run_span.attributes["trellis.run.status"] == "succeeded"

    def component(cid: str):
        return [s for s in finished if s.attributes.get("trellis.component.id") == cid]

    [iteration] = component("Iteration:It")
    assert by_id[iteration.parent.span_id] is run_span
    items = component("X:Fmt")
    assert len(items) == 3
    for item in items:  # each item's components are children of the Iteration's span
        assert by_id[item.parent.span_id] is iteration
        assert item.attributes["trellis.component.path"][0] == "Iteration:It"
    [flaky] = component("F:Flaky")
    assert by_id[flaky.parent.span_id] is run_span
    assert flaky.attributes["trellis.component.retries"] == 1 and flaky.attributes["trellis.component.status"] == "succeeded"
    assert flaky.attributes["trellis.component.type"] == "TestFail" and flaky.name == "component TestFail"
    assert all(s.context.trace_id == run_span.context.trace_id for s in finished)


async def test_a_failing_component_fails_its_span_and_the_runs(spans):
    events = await collect(plan_of(_canvas({"message": "disk on fire", "max_retries": 1, "delay_after_error": 0})),
                           inputs={"xs": {"type": "object", "value": []}})
    assert "disk on fire" in events[-1].error
    finished, _ = _by_name(spans)
    [flaky] = [s for s in finished if s.attributes.get("trellis.component.id") == "F:Flaky"]
    assert flaky.status.status_code == StatusCode.ERROR and "disk on fire" in flaky.status.description
    assert flaky.attributes["trellis.component.retries"] == 1 and flaky.attributes["trellis.component.status"] == "failed"
    [run_span] = [s for s in finished if s.name == "run"]
    assert run_span.status.status_code == StatusCode.ERROR and run_span.attributes["trellis.run.status"] == "failed"


async def test_a_cancelled_run_ends_its_open_spans(spans):
    plan = plan_of({"begin": cpn("Begin", ["S:Slow"]), "S:Slow": cpn("TestSleep", [], {"seconds": 30}, ["begin"])})
    running = start(plan, RunRequest(run_id="run-c", session_id="s"))
    events = []
    async with aclosing(running.batches()) as batches:
        async for batch in batches:
            events.extend(batch)
            if any(getattr(ev, "node_id", "") == "S:Slow" for ev in batch):
                running.cancel()
    assert isinstance(events[-1], RunFinished) and events[-1].cancelled
    finished, _ = _by_name(spans)
    [slow] = [s for s in finished if s.attributes.get("trellis.component.id") == "S:Slow"]
    assert slow.attributes["trellis.component.status"] == "cancelled"
    [run_span] = [s for s in finished if s.name == "run"]
    assert run_span.attributes["trellis.run.status"] == "cancelled" and run_span.status.status_code != StatusCode.ERROR


async def test_off_no_span_is_even_started(monkeypatch):
    reset()
    assert not tracing.ACTIVE

    def no_span(*args, **kwargs):
        raise AssertionError("a span was started while tracing is off")

    monkeypatch.setattr(tracing, "start", no_span)
    events = await collect(plan_of(_canvas({"fail_times": 0})), inputs={"xs": {"type": "object", "value": ["a"]}})
    assert events[-1].error is None


async def test_a_run_waiting_for_the_user_says_so(spans):
    plan = plan_of({
        "begin": cpn("Begin", ["UserFillUp:Ask"]),
        "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
            "enable_tips": True, "tips": "OK?",
            "inputs": {"feedback": {"name": "feedback", "type": "paragraph", "optional": False, "options": []}}},
            ["begin"]),
        "Message:Out": cpn("Message", [], {"content": ["{UserFillUp:Ask@feedback}"]}, ["UserFillUp:Ask"]),
    })
    events = await collect(plan)
    assert events[-1].waiting_for_user and events[-1].error is None
    finished, _ = _by_name(spans)
    [ask] = [s for s in finished if s.attributes.get("trellis.component.id") == "UserFillUp:Ask"]
    assert ask.attributes["trellis.component.status"] == "waiting_for_user" and ask.status.status_code != StatusCode.ERROR
    [run_span] = [s for s in finished if s.name == "run"]
    assert run_span.attributes["trellis.run.status"] == "waiting_for_user"
    assert not [s for s in finished if s.attributes.get("trellis.component.id") == "Message:Out"]
