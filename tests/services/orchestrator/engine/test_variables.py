"""The variable resolver: every reference form, dotted paths, globals, aliases, streams, assignment."""
from __future__ import annotations

import asyncio

import pytest

from services.orchestrator.engine.variables import (
    Resolver,
    Scope,
    StreamValue,
    VariableError,
    find_refs,
    is_ref,
    parse_ref,
    to_jsonable,
    to_text,
    walk_path,
)


def resolver(outputs: dict | None = None, globals_: dict | None = None, known=None, aliases=None) -> Resolver:
    scope = Scope(aliases=aliases)
    for k, v in (outputs or {}).items():
        scope.outputs[k] = dict(v)
    return Resolver(scope, dict(globals_ or {}), known)


@pytest.mark.parametrize("text, parsed", [
    ("Agent:Foo@content", ("cpn", "Agent:Foo", ("content",))),
    ("begin@x", ("cpn", "begin", ("x",))),
    ("{Agent:Foo@content}", ("cpn", "Agent:Foo", ("content",))),
    ("{{ Agent:Foo@content }}", ("cpn", "Agent:Foo", ("content",))),  # bare: any braces/spaces
    ("  {begin@x}  ", ("cpn", "begin", ("x",))),
    ("cpn@json.a.0.b", ("cpn", "cpn", ("json", "a", "0", "b"))),
    ("sys.query", ("global", "sys.query", ())),
    ("{env.counter}", ("global", "env.counter", ())),
    ("item", ("alias", "item", ())),
    ("item.name", ("alias", "item", ("name",))),
    ("hello world", None),
    ("", None),
    ("user@", None),
])
def test_parse_ref(text: str, parsed: object) -> None:
    assert parse_ref(text) == parsed
    assert is_ref(text) == (parsed is not None)


def test_find_refs_in_text_tolerates_extra_braces() -> None:
    text = "a {begin@x} b {{Agent:A@content}} c { {sys.query} } {env.n} {not a ref} {x@} {{{begin@y}}} { env.no }"
    assert find_refs(text) == ["begin@x", "Agent:A@content", "sys.query", "env.n", "begin@y"]
    assert find_refs("no braces here") == []


def test_dotted_paths_walk_dicts_lists_and_json_strings() -> None:
    r = resolver({"X:A": {"json": '{"rows": [{"name": "ann"}, {"name": "bob"}]}', "obj": {"k": [10, 20]}}})
    assert r.get("X:A@json.rows.1.name") == "bob"
    assert r.get("X:A@obj.k.0") == 10
    assert r.get("X:A@obj.k.9") is None and r.get("X:A@obj.nope") is None
    assert walk_path("not json", ["a"]) is None


def test_sys_and_env_globals_with_paths() -> None:
    r = resolver(globals_={"sys.query": "q", "env.cfg": {"a": {"b": 2}}, "sys.files": ["f0", "f1"]})
    assert r.get("sys.query") == "q" and r.get("{sys.query}") == "q"
    assert r.get("env.cfg.a.b") == 2 and r.get("sys.files.1") == "f1"
    assert r.get("env.missing") is None


def test_declared_output_value_is_the_fallback() -> None:
    scope = Scope(declared={"X:A": {"out": {"type": "string", "value": "preset"}}})
    r = Resolver(scope, {})
    assert r.get("X:A@out") == "preset"
    scope.outputs["X:A"] = {"out": "live"}
    assert r.get("X:A@out") == "live"


def test_unknown_component_raises_when_the_canvas_is_known() -> None:
    r = resolver(known={"begin"})
    with pytest.raises(VariableError, match="does not exist: 'Agent:X@content'"):
        r.get("Agent:X@content")
    assert r.get("not a ref", "dflt") == "dflt"


def test_child_scopes_read_their_own_then_the_parent_and_aliases() -> None:
    parent = Scope()
    parent.outputs["begin"] = {"x": "outer"}
    child = Scope(parent=parent, aliases={"item": {"n": 1}, "index": 3})
    child.outputs["X:Kid"] = {"v": "inner"}
    r = Resolver(child, {})
    assert r.get("begin@x") == "outer" and r.get("X:Kid@v") == "inner"
    assert r.get("item.n") == 1 and r.get("index") == 3
    assert Resolver(parent, {}).get("X:Kid@v") is None


async def test_render_text_with_every_form() -> None:
    r = resolver({"begin": {"x": "X", "n": 3, "obj": {"a": 1}, "none": None, "flag": True}},
                 {"sys.query": "Q", "env.e": "E"}, aliases={"item": "it", "index": 0})
    text = "{begin@x}|{{begin@n}}|{begin@obj}|{begin@none}|said: {sys.query}|{ {env.e} }|{item}/{index}|{begin@flag}"
    assert await r.render(text) == 'X|3|{"a": 1}||said: Q|E|it/0|true'
    assert await resolver().render("{item} stays literal outside an Iteration") == \
        "{item} stays literal outside an Iteration"


async def test_a_stream_has_several_live_readers_and_later_readers_get_the_full_text() -> None:
    s = StreamValue()
    r = resolver({"LLM:A": {"content": s}})
    got: dict[str, list[str]] = {"r1": [], "r2": []}

    async def read(name: str) -> None:
        async for chunk in r.get("LLM:A@content"):
            got[name].append(chunk)

    readers = [asyncio.create_task(read("r1")), asyncio.create_task(read("r2"))]
    for tok in ("he", "ll", "o"):
        await asyncio.sleep(0)
        s.push(tok)
        await asyncio.sleep(0)
        assert got["r1"][-1] == tok  # forwarded while produced
    s.close()
    await asyncio.gather(*readers)
    assert got == {"r1": ["he", "ll", "o"], "r2": ["he", "ll", "o"]}
    assert await r.value("LLM:A@content") == "hello"
    assert await r.render("[{LLM:A@content}]") == "[hello]"
    assert [c async for c in s] == ["he", "ll", "o"]  # a late reader replays everything
    parts = r.parts("<{LLM:A@content}>")
    assert parts[0] == "<" and parts[1] is s and parts[2] == ">"
    assert to_jsonable({"c": s}) == {"c": "hello"} and to_text(s) == "hello"


async def test_a_failed_stream_raises_in_every_reader() -> None:
    s = StreamValue()
    s.push("x")
    s.fail(RuntimeError("provider went away"))
    with pytest.raises(RuntimeError, match="provider went away"):
        await s.wait()
    with pytest.raises(RuntimeError):
        async for _ in s:
            pass


def test_assign_globals_and_component_outputs() -> None:
    parent = Scope()
    parent.outputs["Loop:L"] = {"count": 1}
    child = Scope(parent=parent)
    g: dict = {}
    r = Resolver(child, g, known={"Loop:L"})
    r.assign("env.counter", 5)
    r.assign("{sys.x}", "y")
    r.assign("Loop:L@count", 2)  # lands in the scope that owns Loop:L
    assert g == {"env.counter": 5, "sys.x": "y"} and parent.outputs["Loop:L"]["count"] == 2
    with pytest.raises(VariableError):
        r.assign("Loop:L@count.deep", 1)
    with pytest.raises(VariableError):
        r.assign("plain text", 1)


def test_to_jsonable_makes_event_payloads_safe() -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd"
    assert to_jsonable({"a": (1, 2), "b": {3: Odd()}, "c": {1, }}) == {"a": [1, 2], "b": {"3": "odd"}, "c": [1]}
