from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.params import ParamsInvalid
from services.orchestrator.components.string_transform import StringTransform
from services.orchestrator.engine.variables import Scope, StreamValue


async def transform(params: dict[str, Any], **kw: Any) -> Any:
    ctx = NodeContext.for_test(params, component_id="StringTransform:T", **kw)
    await StringTransform("StringTransform:T", params).run(ctx)
    return ctx.output("result")


async def test_split_on_the_default_comma_keeps_empty_pieces() -> None:
    got = await transform({"method": "split", "split_ref": "begin@csv"}, outputs={"begin": {"csv": "a,b,,c"}})
    assert got == ["a", "b", "", "c"]


async def test_split_on_several_delimiters_including_regex_characters() -> None:
    got = await transform({"method": "split", "split_ref": "{sys.query}", "delimiters": ["|", ".", "\n"]},
                          globals_={"sys.query": "a|b.c\nd"})
    assert got == ["a", "b", "c", "d"]


async def test_split_of_a_missing_value_and_of_a_stream() -> None:
    assert await transform({"method": "split", "split_ref": "Gone:x@y"}) == [""]
    got = await transform({"method": "split", "split_ref": "LLM:x@content", "delimiters": [";"]},
                          outputs={"LLM:x": {"content": StreamValue.of("x;y")}})
    assert got == ["x", "y"]


async def test_split_of_a_list_fails_naming_split_ref() -> None:
    with pytest.raises(FieldError, match="^StringTransform:T: params.split_ref: 'begin@xs' must be a string"):
        await transform({"method": "split", "split_ref": "begin@xs"}, outputs={"begin": {"xs": [1]}})


async def test_merge_replaces_refs_joining_lists_and_writing_objects_as_json() -> None:
    got = await transform(
        {"method": "merge", "delimiters": ["|"],
         "script": "{IterationItem:I@index}: {IterationItem:I@item} / {begin@tags} / {begin@obj} / {begin@none}."},
        outputs={"IterationItem:I": {"index": 3, "item": "x"},
                 "begin": {"tags": ["a", "b"], "obj": {"k": "é"}, "none": None}})
    assert got == '3: x / a|b / {"k": "é"} / .'


async def test_merge_uses_iteration_aliases_inside_an_iteration() -> None:
    params = {"method": "merge", "script": "#{index}={item}"}
    ctx = NodeContext.for_test(params, component_id="StringTransform:T")
    ctx.scope = Scope(parent=ctx.scope, aliases={"item": "apple", "index": 0, "result": "apple"})
    await StringTransform("StringTransform:T", params).run(ctx)
    assert ctx.output("result") == "#0=apple"


async def test_merge_keeps_spaces_around_refs_but_drops_extra_braces() -> None:
    got = await transform({"method": "merge", "script": "Hello {sys.query} and { {sys.query} }!"},
                          globals_={"sys.query": "Q"})
    assert got == "Hello Q and Q!"


async def test_merge_with_jinja_gets_raw_values() -> None:
    script = "{% for t in begin_tags %}[{{ t | upper }}]{% endfor %} n={begin@n} q={{sys.query}}"
    got = await transform({"method": "merge", "script": script},
                          outputs={"begin": {"tags": ["a", "b"], "n": 2}}, globals_={"sys.query": "Q"})
    assert got == "[A][B] n=2 q=Q"


async def test_merge_jinja_errors_name_the_script_field() -> None:
    with pytest.raises(FieldError, match="^StringTransform:T: params.script: Jinja2 template error: .*undefined"):
        await transform({"method": "merge", "script": "{{ nope }}"})
    with pytest.raises(FieldError, match="^StringTransform:T: params.script: Jinja2 template error"):
        await transform({"method": "merge", "script": "{{ ''.__class__.__mro__ }}"})


async def test_bad_method_and_delimiters_are_reported() -> None:
    issues = StringTransform.check("StringTransform:T", {"method": "reverse", "delimiters": []})
    assert [i.field for i in issues] == ["params.method", "params.delimiters"]
    with pytest.raises(ParamsInvalid, match=r"^StringTransform:T \(StringTransform\): params.method"):
        await transform({"method": "reverse"})


async def test_jinja_names_used_only_in_statements_map_back_to_references() -> None:
    script = "{% for r in Agent_Foo_rows %}{{ r.name }};{% endfor %}{% if env_flag %}on{% endif %}"
    got = await transform({"method": "merge", "script": script},
                          outputs={"Agent:Foo": {"rows": [{"name": "a"}, {"name": "b"}]}}, globals_={"env.flag": True})
    assert got == "a;b;on"
