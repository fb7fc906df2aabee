from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.params import ParamsInvalid
from services.orchestrator.components.variable_assigner import VariableAssigner
from services.orchestrator.engine.variables import StreamValue


async def assign(variables: list[dict[str, Any]], *, globals_: dict[str, Any] | None = None,
                 outputs: dict[str, dict[str, Any]] | None = None, known: list[str] | None = None) -> NodeContext:
    params = {"variables": variables}
    ctx = NodeContext.for_test(params, component_id="VariableAssigner:T", component_name="VariableAssigner",
                               globals_=globals_, outputs=outputs, known=known)
    await VariableAssigner("VariableAssigner:T", params).run(ctx)
    return ctx


async def one(current: Any, operator: str, parameter: Any = None, **kw: Any) -> Any:
    item = {"variable": "env.v", "operator": operator}
    if parameter is not None:
        item["parameter"] = parameter
    ctx = await assign([item], globals_={"env.v": current, **kw.pop("globals_", {})}, **kw)
    return ctx.get_global("env.v")


async def test_overwrite_takes_the_referenced_value() -> None:
    got = await one("old", "overwrite", "Agent:A@content", outputs={"Agent:A": {"content": ["x", 1]}})
    assert got == ["x", 1]


async def test_overwrite_copies_so_the_source_never_changes_later() -> None:
    src = {"Src:A": {"items": [1, 2]}}
    ctx = await assign([{"variable": "env.v", "operator": "overwrite", "parameter": "Src:A@items"},
                        {"variable": "env.v", "operator": "append", "parameter": 3}],
                       globals_={"env.v": []}, outputs=src)
    assert ctx.get_global("env.v") == [1, 2, 3]
    assert ctx.get("Src:A@items") == [1, 2]


async def test_overwrite_awaits_a_streamed_value() -> None:
    got = await one("", "overwrite", "LLM:A@content", outputs={"LLM:A": {"content": StreamValue.of("streamed")}})
    assert got == "streamed"


@pytest.mark.parametrize(("current", "zero"), [
    ([1, 2], []), ("abc", ""), ({"a": 1}, {}), (True, False), (7, 0), (2.5, 0.0), (None, None),
])
async def test_clear_gives_the_zero_value_of_the_type(current: Any, zero: Any) -> None:
    got = await one(current, "clear")
    assert got == zero and type(got) is type(zero)


async def test_set_expands_references_for_a_string_variable() -> None:
    assert await one("old", "set", "hi={sys.query}!", globals_={"sys.query": "Q"}) == "hi=Q!"
    assert await one(None, "set", "{sys.query}", globals_={"sys.query": "Q"}) == "Q"


async def test_set_keeps_the_literal_for_other_types() -> None:
    assert await one(1, "set", 5) == 5
    assert await one(False, "set", True) is True
    assert await one([1], "set", "{sys.query}", globals_={"sys.query": "Q"}) == "{sys.query}"


async def test_append() -> None:
    assert await one([1, 2], "append", 3) == [1, 2, 3]
    assert await one(None, "append", "a") == ["a"]
    assert await one(["a"], "append", "begin@x", outputs={"begin": {"x": "b"}}) == ["a", "b"]


async def test_append_errors_are_values_like_ragflow() -> None:
    assert await one("not a list", "append", 1) == "ERROR:VARIABLE_NOT_LIST"
    assert await one([1, 2], "append", "text") == "ERROR:PARAMETER_NOT_LIST_ELEMENT_TYPE"


async def test_extend() -> None:
    assert await one([1], "extend", [2, 3]) == [1, 2, 3]
    assert await one(None, "extend", "begin@xs", outputs={"begin": {"xs": ["a"]}}) == ["a"]
    assert await one([], "extend", "[4, 5]") == [4, 5]  # a JSON string list is decoded


async def test_extend_errors() -> None:
    assert await one({"a": 1}, "extend", [1]) == "ERROR:VARIABLE_NOT_LIST"
    assert await one([1], "extend", 5) == "ERROR:PARAMETER_NOT_LIST"
    assert await one([1], "extend", ["x"]) == "ERROR:PARAMETER_NOT_LIST_ELEMENT_TYPE"


async def test_remove_first_and_last() -> None:
    assert await one([1, 2, 3], "remove_first") == [2, 3]
    assert await one([1, 2, 3], "remove_last") == [1, 2]
    assert await one([], "remove_first") == []
    assert await one([], "remove_last") == []
    assert await one("abc", "remove_first") == "ERROR:VARIABLE_NOT_LIST"
    assert await one(3, "remove_last") == "ERROR:VARIABLE_NOT_LIST"


@pytest.mark.parametrize(("operator", "current", "parameter", "expected"), [
    ("+=", 1, 2, 3), ("-=", 10, 4, 6), ("*=", 3, 2.5, 7.5), ("/=", 9, 2, 4.5),
    ("+=", 1, "2", 3),  # a numeric string from a text field is parsed
    ("/=", 1, 0, "ERROR:DIVIDE_BY_ZERO"),
    ("+=", "1", 2, "ERROR:VARIABLE_NOT_NUMBER or PARAMETER_NOT_NUMBER"),
    ("-=", True, 1, "ERROR:VARIABLE_NOT_NUMBER or PARAMETER_NOT_NUMBER"),
    ("*=", 2, [1], "ERROR:VARIABLE_NOT_NUMBER or PARAMETER_NOT_NUMBER"),
    ("/=", None, 2, "ERROR:VARIABLE_NOT_NUMBER or PARAMETER_NOT_NUMBER"),
])
async def test_arithmetic(operator: str, current: Any, parameter: Any, expected: Any) -> None:
    assert await one(current, operator, parameter) == expected


async def test_arithmetic_with_a_referenced_parameter_and_zero_parameter() -> None:
    assert await one(5, "+=", "env.step", globals_={"env.step": 10}) == 15
    assert await one(5, "+=", 0) == 5  # 0 is a valid parameter, not a missing one


async def test_items_apply_in_order_and_write_component_outputs() -> None:
    ctx = await assign([
        {"variable": "env.counter", "operator": "+=", "parameter": 1},
        {"variable": "env.counter", "operator": "*=", "parameter": 10},
        {"variable": "Begin:x@name", "operator": "set", "parameter": "n={env.counter}"},
    ], globals_={"env.counter": 0}, outputs={"Begin:x": {"name": "old"}})
    assert ctx.get_global("env.counter") == 10
    assert ctx.get("Begin:x@name") == "n=10"
    assert ctx.inputs["env.counter"] == 10


async def test_dotted_target_rewrites_the_nested_value_only() -> None:
    original = {"a": {"b": 1, "c": 2}}
    ctx = await assign([{"variable": "Data:x@obj.a.b", "operator": "+=", "parameter": 41}],
                       outputs={"Data:x": {"obj": original}})
    assert ctx.get("Data:x@obj") == {"a": {"b": 42, "c": 2}}
    assert original == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize(("item", "field"), [
    ({"variable": "env.v", "operator": "**=", "parameter": 1}, "params.variables[0].operator"),
    ({"variable": "env.v", "operator": "+="}, "params.variables[0].parameter"),
    ({"operator": "clear"}, "params.variables[0].variable"),
    ({"variable": "not a ref", "operator": "clear"}, "params.variables[0].variable"),
    ({"variable": "env.v"}, "params.variables[0].operator"),
])
async def test_bad_items_fail_naming_component_and_field(item: dict[str, Any], field: str) -> None:
    issues = VariableAssigner.check("VariableAssigner:T", {"variables": [item]})
    assert [i.field for i in issues] == [field]
    with pytest.raises(ParamsInvalid) as err:
        await assign([item], globals_={"env.v": 1})
    assert str(err.value).startswith(f"VariableAssigner:T (VariableAssigner): {field}:")


async def test_unknown_target_component_is_a_clear_error() -> None:
    with pytest.raises(FieldError, match=r"VariableAssigner:T: params.variables\[0\].variable: .*Nope:x@y"):
        await assign([{"variable": "Nope:x@y", "operator": "clear"}], known=["VariableAssigner:T"])


async def test_check_accepts_a_valid_canvas_entry() -> None:
    assert VariableAssigner.check("V:x", {"variables": [
        {"operator": "+=", "parameter": 1, "variable": "env.counter"},
        {"operator": "clear", "variable": "env.list"},
    ]}) == []
