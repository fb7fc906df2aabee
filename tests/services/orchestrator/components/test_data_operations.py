from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.params import ParamsInvalid
from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.data_operations import DataOperations

PEOPLE = [{"name": "Ann", "age": "31", "city": "Paris"}, {"name": "Bob", "age": "25", "city": "Berlin"}]


async def operate(operation: str, query: Any = ("Src:x@people",), outputs: dict[str, Any] | None = None,
                  globals_: dict[str, Any] | None = None, **params: Any) -> Any:
    p = {"query": list(query) if isinstance(query, tuple) else query, "operations": operation, **params}
    ctx = NodeContext.for_test(p, component_id="DataOperations:T", globals_=globals_,
                               outputs=outputs if outputs is not None else {"Src:x": {"people": PEOPLE}})
    await DataOperations("DataOperations:T", p).run(ctx)
    return ctx.output("result")


async def test_select_keys() -> None:
    assert await operate("select_keys", select_keys=["name"]) == [{"name": "Ann"}, {"name": "Bob"}]


async def test_inputs_gather_objects_from_several_refs_and_skip_non_objects() -> None:
    got = await operate("select_keys", query=("Src:x@people", "Src:x@one", "Src:x@text", "Src:x@missing"),
                        outputs={"Src:x": {"people": [*PEOPLE, "not a dict"], "one": {"name": "Cy"}, "text": "hi"}},
                        select_keys=["name"])
    assert got == [{"name": "Ann"}, {"name": "Bob"}, {"name": "Cy"}]


async def test_literal_eval_turns_literal_strings_into_values_recursively() -> None:
    obj = {"n": "42", "f": "1.5", "t": "True", "l": "[1, 'a']", "d": "{'k': (1, 2)}", "s": "hello", "j": '{"a": null}',
           "bad": "[1, ", "nested": {"x": "false"}, "v": "1.2.3"}
    got = await operate("literal_eval", outputs={"Src:x": {"people": obj}})
    assert got == [{"n": 42, "f": 1.5, "t": True, "l": [1, "a"], "d": {"k": [1, 2]}, "s": "hello", "j": {"a": None},
                    "bad": "[1, ", "nested": {"x": False}, "v": "1.2.3"}]


async def test_literal_eval_is_the_default_and_accepts_the_spaced_and_recursive_names() -> None:
    for name in (None, "literal eval", "recursive_eval"):
        assert await operate(name, outputs={"Src:x": {"people": {"a": "1"}}}) == [{"a": 1}]


async def test_combine_merges_repeated_keys_into_lists_without_touching_inputs() -> None:
    a, b, c = {"k": [1], "x": "a"}, {"k": 2, "x": "b"}, {"k": [3, 4], "y": None}
    got = await operate("combine", outputs={"Src:x": {"people": [a, b, c]}})
    assert got == {"k": [1, 2, 3, 4], "x": ["a", "b"], "y": None}
    assert a == {"k": [1], "x": "a"}


@pytest.mark.parametrize(("rules", "names"), [
    ([{"key": "city", "operator": "=", "value": "Paris"}], ["Ann"]),
    ([{"key": "city", "operator": "≠", "value": "Paris"}], ["Bob"]),
    ([{"key": "name", "operator": "contains", "value": "o"}], ["Bob"]),
    ([{"key": "city", "operator": "start with", "value": "B"}], ["Bob"]),
    ([{"key": "city", "operator": "end with", "value": "is"}], ["Ann"]),
    ([{"key": "city", "operator": "starts with", "value": "P"}, {"key": "age", "operator": "equals", "value": 31}],
     ["Ann"]),
    ([{"key": "missing", "operator": "≠", "value": "x"}], []),
    ([], ["Ann", "Bob"]),
])
async def test_filter_values(rules: list[dict[str, Any]], names: list[str]) -> None:
    got = await operate("filter_values", filter_values=rules)
    assert [o["name"] for o in got] == names


async def test_filter_value_may_reference_a_variable() -> None:
    got = await operate("filter_values", filter_values=[{"key": "city", "operator": "=", "value": "{env.city}"}],
                        globals_={"env.city": "Berlin"})
    assert [o["name"] for o in got] == ["Bob"]


async def test_append_or_update() -> None:
    got = await operate("append_or_update", globals_={"sys.query": "Q", "env.tags": ["a", "b"]},
                        updates=[{"key": "city", "value": "Rome"}, {"key": "q", "value": "q={sys.query}"},
                                 {"key": "tags", "value": "{env.tags}"}, {"key": " ", "value": "ignored"}])
    assert got[0] == {"name": "Ann", "age": "31", "city": "Rome", "q": "q=Q", "tags": ["a", "b"]}
    assert got[1]["city"] == "Rome" and PEOPLE[0]["city"] == "Paris"


async def test_remove_keys_and_rename_keys() -> None:
    assert await operate("remove_keys", remove_keys=["age", "city", "nope"]) == [{"name": "Ann"}, {"name": "Bob"}]
    got = await operate("rename_keys", rename_keys=[{"old_key": "name", "new_key": "who"},
                                                    {"old_key": "nope", "new_key": "x"},
                                                    {"old_key": "age", "new_key": ""}])
    assert got == [{"who": "Ann", "age": "31", "city": "Paris"}, {"who": "Bob", "age": "25", "city": "Berlin"}]


async def test_unknown_operation_and_operator_are_errors_naming_the_field() -> None:
    assert [i.field for i in DataOperations.check("DataOperations:T", {"operations": "explode"})] == \
        ["params.operations"]
    with pytest.raises(ParamsInvalid, match=r"^DataOperations:T \(DataOperations\): params.operations: unsupported operation 'explode'"):
        await operate("explode")
    with pytest.raises(ParamsInvalid, match=r"^DataOperations:T \(DataOperations\): params.filter_values\[0\].operator"):
        await operate("filter_values", filter_values=[{"key": "a", "operator": "~", "value": "x"}])
    with pytest.raises(FieldError, match="^DataOperations:T: params.query: 'plain text' is not a variable"):
        await operate("combine", query=["plain text"])
