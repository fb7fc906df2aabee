"""RAGFlow's Iteration form: the last child of an Iteration points back to its IterationItem (the next item).
That edge ends a pass; it is not a cycle. Other cycles stay refused, inside a body or at the top level."""
from __future__ import annotations

from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import NodeFinished, RunFinished
from services.orchestrator.engine.validate import validate
from tests.support.canvas import collect, cpn, of, plan_of


def body(last_down: list[str], *, item_up: list[str] = ()) -> dict:
    return {
        "begin": cpn("Begin", ["Iteration:it"], {"inputs": {"xs": {"type": "object"}}}),
        "Iteration:it": cpn("Iteration", ["Message:out"], {"items_ref": "begin@xs",
                                                            "outputs": {"words": {"ref": "StringTransform:up@result"}}}),
        "IterationItem:item": cpn("IterationItem", ["StringTransform:up"], up=list(item_up), parent="Iteration:it"),
        "StringTransform:up": cpn("StringTransform", last_down, {"method": "merge", "script": "<{IterationItem:item@item}>"},
                                  parent="Iteration:it"),
        "Message:out": cpn("Message", [], {"content": ["{Iteration:it@words}"]}),
    }


def issues(components: dict) -> list[tuple[str, str, str]]:
    return [(i.component_id, i.field, i.message) for i in validate(load_canvas({"components": components}))]


def test_the_back_edge_to_the_iteration_item_is_accepted_both_ways_of_writing_it():
    assert issues(body(["IterationItem:item"])) == []
    assert issues(body([], item_up=["StringTransform:up"])) == []


async def test_the_body_runs_once_per_item_and_the_results_come_back_in_order():
    plan = plan_of(body(["IterationItem:item"]))
    events = await collect(plan, inputs={"xs": {"type": "object", "value": ["a", "b", "c"]}})
    assert isinstance(events[-1], RunFinished) and events[-1].error is None
    assert len(of(events, NodeFinished, "StringTransform:up")) == 3
    [out] = of(events, NodeFinished, "Message:out")
    assert out.outputs["content"] == '["<a>", "<b>", "<c>"]'


def test_a_cycle_that_does_not_go_back_to_the_item_is_still_refused():
    comps = body(["StringTransform:again"])
    comps["StringTransform:again"] = cpn("StringTransform", ["StringTransform:up"], {"method": "merge", "script": "x"},
                                         parent="Iteration:it")
    [(cid, field, message)] = issues(comps)
    assert field == "downstream" and "cycle" in message and "IterationItem" not in message


def test_an_edge_into_the_item_from_outside_its_iteration_is_still_a_boundary_error():
    comps = body([])
    comps["begin"]["downstream"].append("IterationItem:item")
    assert any("cannot cross an Iteration/Loop boundary" in m for _, _, m in issues(comps))
