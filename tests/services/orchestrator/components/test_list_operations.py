from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.params import ParamsInvalid
from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.list_operations import ListOperations

ITEMS = ["a", "b", "c", "d"]


async def operate(operation: str | None, items: Any = ITEMS, **params: Any) -> NodeContext:
    p = {"query": "Src:x@items", **params}
    if operation is not None:
        p["operations"] = operation
    ctx = NodeContext.for_test(p, component_id="ListOperations:T", outputs={"Src:x": {"items": items}})
    await ListOperations("ListOperations:T", p).run(ctx)
    return ctx


async def result(operation: str | None, items: Any = ITEMS, **params: Any) -> Any:
    return (await operate(operation, items, **params)).output("result")


@pytest.mark.parametrize(("n", "expected"), [(1, ["a"]), (4, ["d"]), (-1, ["d"]), (-4, ["a"]), (0, []), (5, []),
                                             (-5, []), ("2", ["b"])])
async def test_nth_is_the_default_operation(n: Any, expected: list[str]) -> None:
    assert await result(None, n=n) == expected


@pytest.mark.parametrize(("operation", "n", "expected"), [
    ("head", 2, ["a", "b"]), ("head", 9, ITEMS), ("head", 0, []), ("topN", 3, ["a", "b", "c"]),
    ("tail", 2, ["c", "d"]), ("tail", 9, ITEMS), ("tail", -1, []),
])
async def test_head_topn_alias_and_tail(operation: str, n: int, expected: list[str]) -> None:
    assert await result(operation, n=n) == expected


@pytest.mark.parametrize(("operation", "n", "lenient"), [
    ("nth", 0, []), ("nth", 5, []), ("nth", -5, []), ("head", 0, []), ("head", 5, ITEMS), ("tail", 5, ITEMS),
    ("tail", 0, []),
])
async def test_strict_mode_refuses_out_of_range(operation: str, n: int, lenient: list[str]) -> None:
    with pytest.raises(FieldError, match=f"^ListOperations:T: params.n: {operation} requires n to be within"):
        await operate(operation, n=n, strict="true")
    assert await result(operation, n=n, strict=False) == lenient


async def test_first_and_last_outputs() -> None:
    ctx = await operate("head", n=3)
    assert (ctx.output("first"), ctx.output("last")) == ("a", "c")
    ctx = await operate("head", n=0)
    assert (ctx.output("result"), ctx.output("first"), ctx.output("last")) == ([], None, None)


@pytest.mark.parametrize(("operator", "value", "expected"), [
    ("=", "b", ["b"]), ("≠", "b", ["ab", "bc", "1", "None"]), ("contains", "b", ["ab", "b", "bc"]),
    ("start with", "b", ["b", "bc"]), ("end with", "b", ["ab", "b"]), ("=", "1", ["1"]),
])
async def test_filter(operator: str, value: str, expected: list[str]) -> None:
    got = await result("filter", ["ab", "b", "bc", 1, None], filter={"operator": operator, "value": value})
    assert [str(x) for x in got] == expected


async def test_sort_scalars_numbers_first_then_text_both_directions() -> None:
    items = ["b", 10, "a", 2, 2.5, None, True]
    assert await result("sort", items) == [2, 2.5, 10, None, "a", "b", True]
    assert await result("sort", items, sort_method="desc") == [True, "b", "a", None, 10, 2.5, 2]


async def test_sort_objects_by_several_keys() -> None:
    rows = [{"score": 2, "title": "b"}, {"score": 1, "title": "z"}, {"score": 2, "title": "a"}, {"title": "none"}]
    got = await result("sort", rows, sort_by="score, title")
    assert got == [{"score": 1, "title": "z"}, {"score": 2, "title": "a"}, {"score": 2, "title": "b"},
                   {"title": "none"}]
    got = await result("sort", rows, sort_by=["score", "title"], sort_method="desc")
    assert [r["title"] for r in got] == ["none", "b", "a", "z"]


async def test_sort_objects_without_sort_by_uses_their_content() -> None:
    rows = [{"b": 1, "a": 2}, {"a": 1, "c": 0}, {"a": 1, "b": 5}]
    assert await result("sort", rows) == [{"a": 1, "b": 5}, {"a": 1, "c": 0}, {"b": 1, "a": 2}]


async def test_drop_duplicates_keeps_first_occurrences_by_content() -> None:
    items = [{"a": 1, "b": [1]}, 1, {"b": [1], "a": 1}, True, 1.0, "1", [1, 2], [1, 2], 1]
    assert await result("drop_duplicates", items) == [{"a": 1, "b": [1]}, 1, True, "1", [1, 2]]


async def test_missing_input_is_empty_and_json_string_list_is_decoded() -> None:
    assert await result("head", None, n=2) == []
    assert await result("head", '["x", "y", "z"]', n=2) == ["x", "y"]


async def test_non_list_input_and_bad_params_name_the_field() -> None:
    with pytest.raises(FieldError, match="^ListOperations:T: params.query: 'Src:x@items' must be an array, got a object"):
        await operate("head", {"a": 1}, n=1)
    with pytest.raises(ParamsInvalid, match=r"^ListOperations:T \(ListOperations\): params.operations: unsupported operation 'shuffle'"):
        await operate("shuffle")
    with pytest.raises(ParamsInvalid, match=r"^ListOperations:T \(ListOperations\): params.filter.operator"):
        await operate("filter", filter={"operator": "~", "value": "x"})
    issues = ListOperations.check("ListOperations:T", {"operations": "shuffle"})
    assert [i.field for i in issues] == ["params.query", "params.operations"]
