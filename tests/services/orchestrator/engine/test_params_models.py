"""Params models (components/params.py): RAGFlow's keys survive them, and their errors name component and field."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from services.orchestrator.components import get_class
from services.orchestrator.components.params import Number, Params, ParamsInvalid, as_issues
from services.orchestrator.engine.dsl import load_canvas, load_with_state, to_v1
from services.orchestrator.engine.validate import validate
from tests.support.canvas import cpn
from tests.support.data import DATA

CANVASES = sorted([*DATA.glob("templates/*.json"), *DATA.glob("dsl_examples/*.json")])


def _keys(value):
    """Every key path in a JSON value, to say which key a model dropped."""
    if isinstance(value, dict):
        return {f".{k}{sub}" for k, v in value.items() for sub in ({""} | _keys(v))}
    if isinstance(value, list):
        return {f"[{i}]{sub}" for i, v in enumerate(value) for sub in ({""} | _keys(v))}
    return set()


@pytest.mark.parametrize("path", CANVASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_component_model_keeps_what_was_loaded_and_the_canvas_exports_unchanged(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    canvas, state = load_with_state(doc)
    parsed = {}
    issues = validate(canvas, require_available=False, parsed=parsed)
    # every component's params fit its model, but for the issues found in them (a pre-0.20 Message without content)
    assert set(canvas.components) - set(parsed) == {i.component_id for i in issues if i.field.startswith("params")}
    assert len(parsed) >= len(canvas.components) - 2
    for cid, model in parsed.items():
        component = canvas.components[cid]
        assert _keys(model.as_dict()) == _keys(component.params), cid  # unknown keys kept, at every level
        assert model.as_dict() == component.params, cid  # and their values unchanged
        assert set(model.model_extra) == set(component.params) - set(type(model).model_fields), cid
    assert to_v1(canvas, state) == doc  # exporting gives back what was loaded


def test_an_error_names_the_component_its_type_and_the_field_path():
    switch = {"conditions": [{"items": [{"cpn_id": "begin@x", "operator": "="},
                                        {"cpn_id": "begin@y", "operator": "roughly"}], "to": ["Message:M"]}],
              "end_cpn_ids": ["Message:M"]}
    comps = {"begin": cpn("Begin", ["switch:0"]), "switch:0": cpn("Switch", ["Message:M"], switch, ["begin"]),
             "Message:M": cpn("Message", [], {"content": ["hi"]}, ["switch:0"])}
    [issue] = validate(load_canvas({"components": comps}))
    assert str(issue) == "switch:0 (Switch): params.conditions[0].items[1].operator: unknown operator 'roughly'"


def test_the_runner_params_are_checked_for_every_component():
    comps = {"begin": cpn("Begin", ["Message:M"]),
             "Message:M": cpn("Message", [], {"content": ["hi"], "max_retries": -1, "delay_after_error": "soon",
                                               "exception_method": "goto"}, ["begin"])}
    found = {(i.field, i.message) for i in validate(load_canvas({"components": comps}))}
    assert found == {("params.max_retries", "must be a number >= 0, not -1"),
                     ("params.delay_after_error", "must be a number, not 'soon'"),
                     ("params.exception_goto", "exception_method 'goto' needs targets")}


def test_a_component_built_from_bad_params_says_which_field():
    with pytest.raises(ParamsInvalid) as err:
        get_class("Switch")("Switch:S", {"conditions": [{"to": ["X"], "items": [{"operator": "~"}]}]})
    assert "Switch:S (Switch): params.conditions[0].items[0].operator: unknown operator '~'" in str(err.value)
    assert "params.end_cpn_ids" in str(err.value)


def test_typed_attributes_and_extra_keys_are_both_there():
    switch = get_class("Switch")("Switch:S", {"conditions": [{"to": "A", "items": [], "uuid": "u-1"}],
                                              "end_cpn_ids": ["B"], "ui_only": {"x": 1}})
    cond = switch.params.conditions[0]
    assert cond.to == "A" and cond.logical_operator == "and" and cond.model_extra == {"uuid": "u-1"}
    assert switch.params.model_extra == {"ui_only": {"x": 1}}


def test_a_reference_where_a_choice_or_a_number_goes_is_kept_for_the_run():
    # A tool's choice may be a reference, resolved when the node runs (as before the models).
    assert get_class("DeepL").check("DeepL:d", {"target_lang": "{begin@lang}", "source_lang": "begin@src"}) == []
    [issue] = get_class("DeepL").check("DeepL:d", {"target_lang": "Klingon"})
    assert issue.field == "params.target_lang" and "'Klingon'" in issue.message

    class Counted(Params):
        n: Number(ge=1, integer=True, ref=True) = 3  # type: ignore[valid-type]

    assert Counted.model_validate({"n": "{sys.n}"}).n == "{sys.n}"  # kept as text: resolved when run
    assert Counted.model_validate({"n": "4"}).n == "4"  # numeric text is kept as given too
    with pytest.raises(ValidationError) as err:
        Counted.model_validate({"n": "many"})
    assert as_issues(err.value, "X:x", "X")[0].message == "must be an integer or a variable reference, not 'many'"
    with pytest.raises(ValidationError):
        Counted.model_validate({"n": 0})


def test_given_tells_a_key_that_was_given_from_a_default():
    params = get_class("DeepL")("DeepL:d", {"auth_key": ""}).params
    assert params.target_lang == "EN-GB" and params.given("target_lang") is None  # the default, not given
    assert params.given("auth_key") == "" and params.given("nope", 7) == 7
