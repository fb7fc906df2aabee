"""Switch: every operator (true and false), and/or, numeric casting, ELSE, outputs."""
from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.components.base import NodeContext, Route
from services.orchestrator.components.switch import OPERATORS, Switch, compare


@pytest.mark.parametrize("value, op, operand, expected", [
    ("Hello World", "contains", "world", True), ("Hello", "contains", "xyz", False),
    ("Hello World", "not contains", "WORLD", False), ("Hello", "not contains", "xyz", True),
    ("Hello", "start with", "he", True), ("Hello", "start with", "lo", False),
    ("Hello", "end with", "LO", True), ("Hello", "end with", "he", False),
    ("", "empty", "", True), (None, "empty", "", True), ([], "empty", "", True), ("x", "empty", "", False),
    ("x", "not empty", "", True), ("", "not empty", "", False), ([1], "not empty", "", True),
    ("a", "=", "a", True), ("a", "=", "b", False), (3, "=", 3.0, True), ("3", "=", 3, True),
    ("a", "≠", "b", True), ("a", "≠", "a", False),
    (5, ">", 3.0, True), ("5", ">", "10", False), (2, ">", 3, False),
    (2, "<", 3.0, True), ("10", "<", "9", False),
    (3, "≥", 3.0, True), (2, "≥", 3, False),
    (3, "≤", 3.0, True), (4, "≤", 3, False),
    ("b", ">", "a", True), (None, ">", 1, False),  # non-numeric falls back, incomparable is False
    (["Red", "blue"], "contains", "red", True), (["red"], "not contains", "red", False),
    (4, ">=", 4, True), (4, "!=", 5, True),  # ASCII spellings
])
def test_every_operator(value: Any, op: str, operand: Any, expected: bool) -> None:
    assert compare(value, op, operand) is expected


def test_every_reference_operator_is_covered_above() -> None:
    assert set(OPERATORS) == {"contains", "not contains", "start with", "end with", "empty", "not empty",
                              "=", "≠", ">", "<", "≥", "≤"}


def test_an_unknown_operator_fails() -> None:
    with pytest.raises(ValueError, match="unsupported Switch operator 'like'"):
        compare("a", "like", "a")


async def switch(conditions: list, outputs: dict, end=("Else:E",)) -> tuple[Route, NodeContext]:
    params = {"conditions": conditions, "end_cpn_ids": list(end)}
    ctx = NodeContext.for_test(params, component_id="Switch:S", outputs=outputs)
    ctx.env.display.update({"A:a": "Branch A"})
    route = await Switch("Switch:S", params).run(ctx)
    return route, ctx


def cond(items: list, to: list, lo: str = "and") -> dict:
    return {"logical_operator": lo, "items": items, "to": to}


def item(ref: str, op: str, value: Any) -> dict:
    return {"cpn_id": ref, "operator": op, "value": value}


async def test_first_matching_condition_wins_and_outputs_next_ids_and_names() -> None:
    route, ctx = await switch([cond([item("begin@x", "=", "1")], ["A:a"]),
                               cond([item("begin@x", "not empty", "")], ["B:b"])], {"begin": {"x": "1"}})
    assert route.next == ("A:a",)
    assert ctx.output("_next") == ["A:a"] and ctx.output("next") == ["Branch A"]
    assert ctx.inputs == {"begin@x": "1"}


async def test_and_needs_all_items_or_needs_one() -> None:
    data = {"begin": {"x": "apple", "n": 5}}
    both = [item("begin@x", "start with", "ap"), item("begin@n", ">", "10")]
    route, _ = await switch([cond(both, ["A:a"], "and")], data)
    assert route.next == ("Else:E",)
    route, _ = await switch([cond(both, ["A:a"], "or")], data)
    assert route.next == ("A:a",)


async def test_numeric_input_casts_the_value_and_else_is_the_fallback() -> None:
    route, _ = await switch([cond([item("begin@n", "=", "5")], ["A:a"])], {"begin": {"n": 5}})
    assert route.next == ("A:a",)
    route, ctx = await switch([cond([item("begin@n", "<", "1")], ["A:a"])], {"begin": {"n": 5}})
    assert route.next == ("Else:E",) and ctx.output("_next") == ["Else:E"]


async def test_items_without_a_reference_are_skipped_and_an_empty_condition_matches() -> None:
    route, _ = await switch([cond([item("", "=", "x")], ["A:a"])], {})
    assert route.next == ("A:a",)  # RAGFlow: all([]) holds


async def test_dotted_path_and_sys_query_references() -> None:
    params = {"conditions": [cond([item("X:J@json.status", "=", "ok"), item("sys.query", "contains", "GO")],
                                  ["A:a"])], "end_cpn_ids": ["Else:E"]}
    ctx = NodeContext.for_test(params, outputs={"X:J": {"json": '{"status": "ok"}'}}, globals_={"sys.query": "let's go"})
    assert (await Switch("Switch:S", params).run(ctx)).next == ("A:a",)


def test_check_names_each_field() -> None:
    issues = Switch.check("Switch:S", {"conditions": [{"items": [{"cpn_id": "not a ref", "operator": "="}],
                                                       "to": ["A:a"], "logical_operator": "xor"}]})
    assert sorted(i.field for i in issues) == ["params.conditions[0].items[0].cpn_id",
                                               "params.conditions[0].logical_operator", "params.end_cpn_ids"]
    assert Switch.check("Switch:S", {"conditions": [], "end_cpn_ids": ["E"]})[0].field == "params.conditions"
