"""The DSL loader (services/orchestrator/engine/dsl), its validation (services/orchestrator/engine/validate.py) and the
variable resolver (services/orchestrator/engine/variables.py) fuzzed with hypothesis: whatever a client sends,
the answer is the result or a clear error of the module's own kind (DslError, ValidationFailed,
VariableError), never another exception. Derandomized: every run tries the same cases.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.orchestrator.components import registered
from services.orchestrator.engine.dsl import DslError, load_canvas, to_v1, to_v2_dict
from services.orchestrator.engine.validate import ValidationFailed, compile_plan, validate
from services.orchestrator.engine.variables import Resolver, Scope, StreamValue, VariableError, find_refs, walk_path


@pytest.fixture(autouse=True, scope="module")
def _report_counts():
    yield
    print(f"\nhypothesis: {COUNT['dsl']} DSL documents, {COUNT['variables']} resolver cases")


FUZZ = settings(max_examples=int(os.environ.get("TRELLIS_FUZZ_EXAMPLES_DSL", "250")), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
COUNT = {"dsl": 0, "variables": 0}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
ids = st.sampled_from(["begin", "Agent:A", "Message:Out", "Switch:S", "Iteration:I", "IterationItem:II", "x", ""])
names = st.sampled_from(sorted(registered())) | st.text(max_size=10)
refs = st.sampled_from(["{sys.query}", "{Agent:A@content}", "{begin@x}", "{env.n}", "{item}", "{Nope:Z@y.0.a}",
                        "{{ sys.files.0 }}", "{x@}", "{@y}", "{", "}"])
param_values = json_values | refs | st.lists(refs | st.text(max_size=6), max_size=3)
components = st.dictionaries(ids, st.fixed_dictionaries(
    {"obj": st.fixed_dictionaries({"component_name": names},
                                  optional={"params": st.dictionaries(st.text(max_size=10) | st.sampled_from(
                                      ["prologue", "content", "llm_id", "sys_prompt", "items_ref", "conditions",
                                       "outputs", "inputs", "tools", "end_cpn_ids"]), param_values, max_size=4)}),
     "downstream": st.lists(ids, max_size=3), "upstream": st.lists(ids, max_size=3)},
    optional={"parent_id": ids}) | json_values, max_size=5)
dsl_documents = st.fixed_dictionaries(
    {"components": components},
    optional={"globals": json_values, "variables": json_values, "history": json_values, "path": json_values,
              "graph": json_values, "retrieval": json_values, "version": st.sampled_from([1, 2, "2"])}) | json_values


def _load_and_check(doc: object) -> None:
    COUNT["dsl"] += 1
    try:
        canvas = load_canvas(doc if not isinstance(doc, (str, bytes)) else doc)
    except DslError as exc:
        assert str(exc).strip()
        return
    issues = validate(canvas, require_available=False)
    assert all(str(i).strip() for i in issues)
    try:
        compile_plan(canvas, require_available=False)
    except ValidationFailed as exc:
        assert exc.issues and str(exc).startswith("canvas is not valid: ")
    json.dumps(to_v1(canvas))  # what the orchestrator stores and returns stays JSON
    json.dumps(to_v2_dict(canvas))


@FUZZ
@given(doc=dsl_documents)
def test_any_dsl_document_loads_or_is_refused_clearly(doc):
    _load_and_check(doc)


@FUZZ
@given(text=st.text(max_size=40) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_any_dsl_text_loads_or_is_refused_clearly(text):
    _load_and_check(text)


def _scope(outputs: dict) -> Scope:
    scope = Scope(declared={"Agent:A": {"content": {"value": "declared"}}})
    scope.outputs.update(outputs)
    return Scope(parent=scope, aliases={"item": outputs.get("x", {}), "index": 0})


texts = st.lists(refs | st.text(max_size=8) | st.sampled_from(["{", "}", "{{", "@", ".", "sys.", "env."]),
                 max_size=8).map("".join)
outputs = st.dictionaries(st.sampled_from(["Agent:A", "begin", "x"]),
                          st.dictionaries(st.sampled_from(["content", "x", "y"]), json_values, max_size=3), max_size=3)


@FUZZ
@given(text=texts, outs=outputs, globals_=st.dictionaries(st.sampled_from(["sys.query", "sys.files", "env.n"]),
                                                          json_values, max_size=3),
       value=json_values)
def test_resolver_renders_reads_and_assigns_or_names_the_bad_reference(text, outs, globals_, value):
    COUNT["variables"] += 1
    resolver = Resolver(_scope(outs), dict(globals_), known=frozenset({"Agent:A", "begin", "x"}))
    for ref in [text, *find_refs(text)]:
        try:
            resolver.get(ref)
            resolver.assign(ref, value)
        except VariableError as exc:
            assert exc.ref == ref and str(exc).strip()
    try:
        rendered = asyncio.run(resolver.render(text))
    except VariableError as exc:
        assert str(exc).strip()
    else:
        assert isinstance(rendered, str)


@FUZZ
@given(value=json_values, path=st.lists(st.text(max_size=4) | st.integers(-3, 5).map(str), max_size=4))
def test_walk_path_never_raises(value, path):
    COUNT["variables"] += 1
    walk_path(value, path)
    stream = StreamValue.of(json.dumps(value))
    walk_path(stream, path)
