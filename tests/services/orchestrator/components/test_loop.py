"""Loop termination operators by value type, and the small control components."""
from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.exit_loop import ExitLoop
from services.orchestrator.components.iteration_item import IterationItem
from services.orchestrator.components.loop import Loop, evaluate
from services.orchestrator.components.loop_item import LoopItem
from services.orchestrator.engine.variables import Scope


@pytest.mark.parametrize("var, op, value, expected", [
    # str
    ("hello", "contains", "ell", True), ("hello", "not contains", "ell", False),
    ("hello", "start with", "he", True), ("hello", "end with", "xo", False),
    ("1", "is", "1", True), ("1", "is not", "1", False),
    ("", "empty", "", True), ("x", "not empty", "", True),
    # bool
    (True, "is", "true", True), (False, "is", True, False), (True, "is not", "false", True),
    (False, "empty", "", False), (True, "not empty", "", True),
    # number
    (3, "=", "3", True), (3, "≠", 3, False), (3, ">", "2", True), (3, "<", "2", False),
    (3, "≥", 3, True), (2.5, "≤", "2", False), (0, "empty", "", False), (0, "not empty", "", True),
    # dict
    ({}, "empty", "", True), ({"a": 1}, "not empty", "", True),
    # list
    (["a"], "contains", "a", True), (["a"], "not contains", "a", False),
    (["a"], "is", ["a"], True), (["a"], "is not", ["a"], False), ([], "empty", "", True), ([1], "not empty", "", True),
    # None (a child that has not run yet)
    (None, "empty", "", True), (None, "is", "1", False), (None, "not empty", "", False),
])
def test_termination_operators(var: Any, op: str, value: Any, expected: bool) -> None:
    assert evaluate(var, op, value) is expected


@pytest.mark.parametrize("var, op", [({"a": 1}, "contains"), (3, "contains"), (True, ">")])
def test_an_operator_that_does_not_fit_the_type_fails_clearly(var: Any, op: str) -> None:
    with pytest.raises(ValueError, match=f"operator '{op}' does not apply"):
        evaluate(var, op, "x")


async def test_loop_without_children_runner_sets_its_variables() -> None:
    params = {"maximum_loop_count": 0, "loop_variables": [
        {"variable": "a", "input_mode": "constant", "type": "string", "value": "x"},
        {"variable": "b", "input_mode": "variable", "type": "number", "value": "begin@n"},
        {"variable": "c", "input_mode": "other", "type": "array<string>", "value": ""},
        {"variable": "", "input_mode": "constant", "type": "string", "value": ""}]}
    ctx = NodeContext.for_test(params, component_id="Loop:L", outputs={"begin": {"n": 4}})
    await Loop("Loop:L", params).run(ctx)
    assert ctx.outputs == {"a": "x", "b": 4, "c": []}


async def test_items_and_exit_loop_use_their_scope() -> None:
    scope_ctx = NodeContext.for_test({}, component_id="IterationItem:S")
    scope_ctx.scope.aliases = {"item": "apple", "index": 2}
    await IterationItem("IterationItem:S", {}).run(scope_ctx)
    assert scope_ctx.outputs == {"item": "apple", "index": 2, "result": "apple"}
    ctx = NodeContext.for_test({}, component_id="LoopItem:S")
    ctx.scope.aliases = {"index": 3}
    await LoopItem("LoopItem:S", {}).run(ctx)
    assert ctx.output("index") == 3
    ctx = NodeContext.for_test({}, component_id="ExitLoop:E")
    assert ctx.scope.exit_requested is False
    await ExitLoop("ExitLoop:E", {}).run(ctx)
    assert isinstance(ctx.scope, Scope) and ctx.scope.exit_requested is True
