"""Categorize: one classification call through the real llm_gateway, then routing and pruning."""
from __future__ import annotations

import pytest

from services.orchestrator.components.categorize import Categorize, choose
from services.orchestrator.engine.events import NodeFinished
from services.orchestrator.engine.state import SessionState
from services.orchestrator.engine.validate import ValidationFailed
from tests.support.canvas import cpn, node_ctx, of, run_canvas, services
from tests.support.llm_gateway import llm_gateway

CATEGORIES = {
    "Billing": {"description": "Invoices, payments and refunds.", "examples": ["I was charged twice.\nRefund me."],
                "to": ["Message:billing"]},
    "Shipping": {"description": "Delivery and tracking.", "examples": ["Where is my parcel?"],
                 "to": ["Message:shipping"]},
    "Other ": {"description": "Anything else.", "to": ["Message:other"]},
}


def canvas(llm_id: str) -> dict:
    return {"components": {
        "begin": cpn("Begin", ["Categorize:c"], {"mode": "task", "inputs": {
            "ticket": {"key": "ticket", "name": "ticket", "type": "line", "optional": False, "value": ""}}}),
        "Categorize:c": cpn("Categorize", [], {"llm_id": llm_id, "query": "begin@ticket",
                                                "category_description": CATEGORIES}),
        "Message:billing": cpn("Message", ["Message:end"], {"content": ["billing team"]}, ["Categorize:c"]),
        "Message:shipping": cpn("Message", ["Message:end"], {"content": ["shipping team"]}, ["Categorize:c"]),
        "Message:other": cpn("Message", ["Message:end"], {"content": ["front desk"]}, ["Categorize:c"]),
        "Message:end": cpn("Message", [], {"content": ["category={Categorize:c@category_name}"]}),
    }}


SCRIPTS = {"chat": {"shipping": ["Shipping"], "confused": ["I am not sure what this is."],
                    "verbose": ["Not Billing. Shipping, clearly shipping."]}}


async def test_routes_to_the_chosen_category_and_prunes_the_others():
    async with llm_gateway(SCRIPTS) as llm:
        events = await run_canvas(canvas("shipping@Scripted"), services(llm),
                                  inputs={"ticket": {"type": "line", "value": "My parcel never arrived.\nHelp!"}})
        [call] = llm.calls_to("shipping")
    ran = {e.node_id for e in of(events, NodeFinished) if not e.skipped}
    skipped = {e.node_id for e in of(events, NodeFinished) if e.skipped}
    assert {"Message:shipping", "Message:end"} <= ran and skipped == {"Message:billing", "Message:other"}
    [cat] = of(events, NodeFinished, "Categorize:c")
    assert cat.outputs["category_name"] == "Shipping" and cat.outputs["_next"] == ["Message:shipping"]
    assert cat.inputs == {"begin@ticket": "My parcel never arrived.\nHelp!"}
    [end] = of(events, NodeFinished, "Message:end")
    assert end.outputs["content"] == "category=Shipping"
    system, user = call.messages
    assert "Billing\n - Shipping\n - Other " in system.content and "Description: Delivery and tracking." in system.content
    assert 'USER: "I was charged twice.    Refund me." → Billing' in system.content
    assert user.content == '\n---- Real Data ----\nUSER: "My parcel never arrived.Help!" →\n'


async def test_no_category_named_falls_back_to_the_last_one():
    async with llm_gateway(SCRIPTS) as llm:
        events = await run_canvas(canvas("confused@Scripted"), services(llm),
                                  inputs={"ticket": {"value": "hello"}})
    [cat] = of(events, NodeFinished, "Categorize:c")
    assert cat.outputs["category_name"] == "Other " and cat.outputs["_next"] == ["Message:other"]
    assert not of(events, NodeFinished, "Message:other")[0].skipped


def test_the_most_mentioned_name_wins_and_names_match_without_their_spaces():
    assert choose("Not Billing. Shipping, clearly shipping.", CATEGORIES) == "Shipping"
    assert choose("billing or shipping", CATEGORIES) == "Billing"  # a tie goes to the first declared
    assert choose("other", CATEGORIES) == "Other "  # "Other " (template-style trailing space) still matches


async def test_history_window_shows_the_previous_turn_with_the_query():
    state = SessionState.fresh()
    state.history = [["user", "old"], ["assistant", "previous answer"], ["user", "new question"]]
    async with llm_gateway(SCRIPTS) as llm:
        params = {"llm_id": "shipping@Scripted", "category_description": CATEGORIES, "message_history_window_size": 1}
        ctx = node_ctx(services(llm), params, query="new question", state=state)
        route = await Categorize("Categorize:c", params).run(ctx)
        [call] = llm.calls_to("shipping")
    assert list(route.next) == ["Message:shipping"]
    assert call.messages[1].content == '\n---- Real Data ----\nASSISTANT: "previous answer" | USER: "new question" →\n'


async def test_llm_id_override_applies():
    async with llm_gateway(SCRIPTS) as llm:
        params = {"llm_id": "confused@Scripted", "category_description": CATEGORIES}
        ctx = node_ctx(services(llm), params, query="x", overrides={"llm_id": "verbose@Scripted"})
        route = await Categorize("Categorize:c", params).run(ctx)
    assert list(route.next) == ["Message:shipping"] and not llm.calls_to("confused")


async def test_validation_requires_categories_with_targets():
    dsl = canvas("m")
    dsl["components"]["Categorize:c"]["obj"]["params"]["category_description"] = {
        "A": {"description": "a", "to": []}, "B": {"description": "b", "to": ["Message:end"]}}
    with pytest.raises(ValidationFailed) as err:
        await run_canvas(dsl, services())
    assert [(i.component_id, i.field) for i in err.value.issues] == [
        ("Categorize:c", "params.category_description.A.to")]
