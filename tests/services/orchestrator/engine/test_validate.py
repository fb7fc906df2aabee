"""Validation: one test per error, each naming the component id and the field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.validate import ValidationFailed, compile_plan, validate, validate_file
from tests.support import engine_components  # noqa: F401  (registers TestNoop)
from tests.support.canvas import cpn


def issues(components: dict, **kw) -> list[tuple[str, str, str]]:
    return [(i.component_id, i.field, i.message) for i in validate(load_canvas({"components": components}), **kw)]


def base(**more: dict) -> dict:
    comps = {"begin": cpn("Begin", ["Message:M"]), "Message:M": cpn("Message", [], {"content": ["hi"]}, ["begin"])}
    comps.update(more)
    return comps


def test_a_valid_canvas_has_no_issue() -> None:
    assert issues(base()) == []


def test_unknown_component_name_lists_the_known_ones() -> None:
    got = issues(base(**{"Foo:X": cpn("Foo", [], None, ["begin"])}))
    assert len(got) == 1
    cid, fld, msg = got[0]
    assert (cid, fld) == ("Foo:X", "obj.component_name")
    assert msg.startswith("unknown component_name 'Foo'") and "Switch" in msg and "Agent" in msg


def test_a_known_component_that_is_not_built_is_not_available_yet(monkeypatch) -> None:
    from services.orchestrator import components as registry
    monkeypatch.setattr(registry, "PENDING", registry.PENDING | {"FutureThing"})
    comps = base(**{"FutureThing:A": cpn("FutureThing", ["Message:M"], {}, ["begin"])})
    assert issues(comps) == [("FutureThing:A", "obj.component_name", "component FutureThing is not available yet")]
    assert issues(comps, require_available=False) == []  # the structure is fine
    with pytest.raises(ValidationFailed, match="component FutureThing is not available yet"):
        compile_plan(load_canvas({"components": comps}))


def test_reference_to_a_missing_component() -> None:
    comps = base()
    comps["Message:M"]["obj"]["params"]["content"] = ["{Agent:Gone@content} and {begin@x}"]
    assert issues(comps) == [("Message:M", "params.content[0]",
                              "reference to missing component 'Agent:Gone' in 'Agent:Gone@content'")]


def test_bare_reference_to_a_missing_component_but_not_an_email_literal() -> None:
    comps = base(**{"Switch:S": cpn("Switch", ["Message:M"], {
        "conditions": [{"items": [{"cpn_id": "LLM:Nope@content", "operator": "=", "value": "a@b.com"}],
                        "to": ["Message:M"]}], "end_cpn_ids": ["Message:M"]}, ["begin"])})
    comps["begin"]["downstream"] = ["Switch:S"]
    assert issues(comps) == [("Switch:S", "params.conditions[0].items[0].cpn_id",
                              "reference to missing component 'LLM:Nope' in 'LLM:Nope@content'")]


def test_missing_begin() -> None:
    comps = {"Message:M": cpn("Message", [], {"content": ["hi"]})}
    assert issues(comps) == [("", "components.begin", "missing 'begin' component")]
    comps = {"Begin:B": cpn("Begin", [])}
    assert "RAGFlow requires the id 'begin'" in issues(comps)[0][2]


def test_a_cycle_that_is_not_a_loop() -> None:
    comps = base(**{"X:A": cpn("TestNoop", ["X:B"], None, ["begin"]), "X:B": cpn("TestNoop", ["X:A"])})
    comps["begin"]["downstream"].append("X:A")
    got = issues(comps)
    assert len(got) == 1 and got[0][1] == "downstream"
    assert got[0][0] in ("X:A", "X:B") and "cycle" in got[0][2] and "only a Loop may repeat" in got[0][2]
    assert "X:A -> X:B -> X:A" in got[0][2] or "X:B -> X:A -> X:B" in got[0][2]


def switch(**params: object) -> dict:
    comps = base(**{"Switch:S": cpn("Switch", ["Message:M"], params, ["begin"])})
    comps["begin"]["downstream"] = ["Switch:S"]
    return comps


def test_switch_condition_without_to() -> None:
    comps = switch(conditions=[{"items": [{"cpn_id": "begin@x", "operator": "=", "value": "1"}], "to": []}],
                   end_cpn_ids=["Message:M"])
    assert issues(comps) == [("Switch:S", "params.conditions[0].to", "condition has no 'to' target")]


def test_switch_without_end_cpn_ids() -> None:
    comps = switch(conditions=[{"items": [], "to": ["Message:M"]}])
    assert issues(comps) == [("Switch:S", "params.end_cpn_ids", "a Switch needs an ELSE target (end_cpn_ids)")]


def test_switch_with_an_unknown_operator_and_a_target_that_does_not_exist() -> None:
    comps = switch(conditions=[{"items": [{"cpn_id": "begin@x", "operator": "like", "value": "1"}],
                                "to": ["Message:Nowhere"]}], end_cpn_ids=["Message:M"])
    assert sorted(issues(comps)) == [
        ("Switch:S", "params.conditions[0].items[0].operator", "unknown operator 'like'"),
        ("Switch:S", "params.conditions[0].to[0]", "unknown component 'Message:Nowhere'")]


def iteration(items_ref: object) -> dict:
    comps = base(**{
        "Iteration:I": cpn("Iteration", ["Message:M"], {"items_ref": items_ref}, ["begin"]),
        "IterationItem:S": cpn("IterationItem", [], parent="Iteration:I")})
    comps["begin"]["downstream"] = ["Iteration:I"]
    return comps


def test_iteration_items_ref_must_be_a_reference() -> None:
    assert issues(iteration("begin@xs")) == []
    assert issues(iteration("a, b, c")) == [
        ("Iteration:I", "params.items_ref", "must be a variable reference like 'cpn@var', not 'a, b, c'")]


def test_iteration_needs_its_start_child() -> None:
    comps = iteration("begin@xs")
    del comps["IterationItem:S"]
    assert issues(comps) == [("Iteration:I", "children", "Iteration needs exactly one IterationItem child "
                                                         "(parent_id 'Iteration:I'), found 0")]


def test_a_child_whose_parent_is_missing() -> None:
    comps = base(**{"X:Child": cpn("TestNoop", [], None, [], parent="Iteration:Gone")})
    assert issues(comps) == [("X:Child", "parent_id", "parent 'Iteration:Gone' does not exist")]


def test_a_child_of_a_component_that_is_not_a_container() -> None:
    comps = base(**{"X:Child": cpn("TestNoop", [], None, [], parent="Message:M")})
    assert issues(comps) == [("X:Child", "parent_id", "parent 'Message:M' is a Message, not an Iteration or Loop")]


def test_edges_cannot_cross_an_iteration_boundary() -> None:
    comps = iteration("begin@xs")
    comps["IterationItem:S"]["downstream"] = ["Message:M"]
    got = issues(comps)
    assert got == [("IterationItem:S", "downstream[0]", "'Message:M' is in the top level but 'IterationItem:S' "
                    "is in 'Iteration:I': edges cannot cross an Iteration/Loop boundary")]


def test_unknown_downstream_and_exception_settings() -> None:
    comps = base()
    comps["Message:M"]["downstream"] = ["Message:Gone"]
    comps["Message:M"]["obj"]["params"].update(exception_method="retry", max_retries=-1)
    assert sorted(issues(comps)) == [
        ("Message:M", "downstream[0]", "unknown component 'Message:Gone'"),
        ("Message:M", "params.exception_method", "must be 'comment', 'goto' or empty, not 'retry'"),
        ("Message:M", "params.max_retries", "must be a number >= 0, not -1")]


def test_exit_loop_outside_a_loop_and_message_without_content() -> None:
    comps = base(**{"ExitLoop:E": cpn("ExitLoop", [], None, ["begin"])})
    comps["Message:M"]["obj"]["params"]["content"] = ["  "]
    assert sorted(issues(comps)) == [
        ("ExitLoop:E", "parent_id", "ExitLoop must be the child of a Loop"),
        ("Message:M", "params.content", "a Message needs at least one non-empty content template")]


def test_loop_params_are_checked() -> None:
    comps = base(**{"Loop:L": cpn("Loop", ["Message:M"], {
        "maximum_loop_count": -2, "logical_operator": "xor",
        "loop_termination_condition": [{"variable": "", "operator": "is"},
                                       {"variable": "begin@x", "operator": "~"}]}, ["begin"]),
        "LoopItem:S": cpn("LoopItem", [], parent="Loop:L")})
    assert sorted(f for _, f, _ in issues(comps)) == [
        "params.logical_operator", "params.loop_termination_condition[0].variable",
        "params.loop_termination_condition[1].operator", "params.maximum_loop_count"]


def test_validate_file(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"components": base()}))
    assert validate_file(good) == []
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    (issue,) = validate_file(bad)
    assert issue.field == "<document>" and "not valid JSON" in issue.message
    (issue,) = validate_file(tmp_path / "missing.json")
    assert "cannot read" in issue.message
    fixture = Path(__file__).resolve().parents[3] / "data/dsl_examples/go_fixture_all_components.json"
    assert validate_file(fixture, require_available=False) == []
    assert not any("UserFillUp" in i.message for i in validate_file(fixture))  # its nine UserFillUp nodes are fine


def test_an_agent_tool_that_is_not_available_fails_validation_naming_the_tool(monkeypatch) -> None:
    from services.orchestrator import components as registry
    monkeypatch.setattr(registry, "PENDING", registry.PENDING | {"FutureSearch", "FutureBing"})
    tools = [{"component_name": "FutureSearch", "name": "Search", "params": {}},
             {"component_name": "Agent", "name": "Helper", "params": {"tools": [{"component_name": "FutureBing", "params": {}}]}},
             {"component_name": "Teleporter", "params": {}},
             {"component_name": "CodeExec", "params": {}}]
    comps = base(**{"Agent:A": cpn("Agent", ["Message:M"], {"llm_id": "", "tools": tools}, ["begin"])})
    found = issues(comps)
    assert ("Agent:A", "params.tools[0].component_name", "tool FutureSearch is not available yet") in found
    assert ("Agent:A", "params.tools[1].params.tools[0].component_name", "tool FutureBing is not available yet") in found
    assert ("Agent:A", "params.tools[2].component_name", "unknown tool component 'Teleporter'") in found
    assert not [f for f in found if f[1].startswith("params.tools[3]")]  # CodeExec is here
    assert [f for f in issues(comps, require_available=False)] == [
        ("Agent:A", "params.tools[2].component_name", "unknown tool component 'Teleporter'")]


@pytest.mark.parametrize("name, params", [
    ("ArXiv", {"top_n": float("inf")}),
    ("DocGenerator", {"content": "x", "output_format": ["pdf"]}),
    ("ExcelProcessor", {"output_format": {"a": 1}}),
    ("Loop", {"loop_termination_condition": 5}),
    ("Iteration", {"items_ref": "begin@x", "outputs": [1]}),
    ("LLM", {"llm_id": "x", "message_history_window_size": float("inf")}),
    ("BGPT", {"days_back": "²"}),
])
def test_params_a_check_did_not_expect_are_an_issue_naming_the_component(name, params) -> None:
    found = issues(base(**{f"{name}:A": cpn(name, ["Message:M"], params, ["begin"])}), require_available=False)
    assert any(cid == f"{name}:A" and fld.startswith("params") for cid, fld, _ in found), found


@pytest.mark.parametrize("port", ["465.5", 70000, "smtp", 0])
def test_an_email_port_that_is_no_port_is_named(port) -> None:
    params = {"smtp_server": "mail.example.org", "smtp_port": port, "email": "a@b.example", "password": "x"}
    found = issues(base(**{"Email:A": cpn("Email", ["Message:M"], params, ["begin"])}), require_available=False)
    assert any(fld == "params.smtp_port" for _, fld, _ in found), found
