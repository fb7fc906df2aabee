"""DSL: every RAGFlow agent template and the Go fixture load, validate (structure) and round-trip."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from services.orchestrator.engine.dsl import DslError, load_canvas, load_with_state, to_v1, to_v2_dict
from services.orchestrator.engine.state import SessionState
from services.orchestrator.engine.validate import validate

SHARED = Path(__file__).resolve().parents[3] / "data"  # RAGFlow's templates and examples (NOTICE.md there)
INGESTION = {"advanced_ingestion_pipeline.json", "chunk_summary.json", "compiler.json", "title_chunker.json"}
AGENT_FILES = sorted(p for p in (SHARED / "templates").glob("*.json") if p.name not in INGESTION)
FIXTURE = SHARED / "dsl_examples" / "go_fixture_all_components.json"
ALL = [*AGENT_FILES, FIXTURE]


def test_the_reference_files_are_there() -> None:
    assert len(AGENT_FILES) == 15 and FIXTURE.exists()


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_agent_canvas_loads_validates_and_round_trips(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    canvas, state = load_with_state(raw)
    assert canvas.components and "begin" in canvas.components
    assert validate(canvas, require_available=False) == []
    # v1 -> v2 -> v1 is exact, template wrapper and run state included.
    assert to_v1(canvas, state) == raw
    # v1 -> v2 -> v1 -> v2 without change (the run state lives in the session, not the v2 canvas).
    v2_a = to_v2_dict(canvas)
    v2_b = to_v2_dict(load_canvas(to_v1(canvas)))
    assert v2_b == v2_a
    # and v2 itself reloads to the same canvas
    assert to_v2_dict(load_canvas(json.dumps(v2_a))) == v2_a


def test_template_wrapper_and_ui_keys_are_kept() -> None:
    raw = json.loads((SHARED / "templates" / "customer_feedback_dispatcher.json").read_text())
    canvas = load_canvas(raw)
    assert canvas.template and canvas.template["title"] == raw["title"]
    assert canvas.graph == raw["dsl"]["graph"]
    out = to_v1(canvas)
    assert list(out) == list(raw) and out["dsl"]["components"] == raw["dsl"]["components"]


def test_run_state_is_split_off_into_the_session() -> None:
    raw = json.loads((SHARED / "templates" / "web_search_assistant.json").read_text())
    canvas, state = load_with_state(raw)
    assert state.history == raw["dsl"]["history"] and state.path == raw["dsl"]["path"]
    assert state.retrieval == raw["dsl"]["retrieval"] and state.globals == raw["dsl"]["globals"]
    v2 = to_v2_dict(canvas)
    for key in ("history", "retrieval", "globals", "path", "memory"):
        assert key not in v2 and key not in v2["extra"]
    assert raw["dsl"]["history"] and json.dumps(raw["dsl"]["history"])[:40] not in json.dumps(v2)
    fresh = to_v1(canvas)["dsl"]  # without a session: empty run state
    assert fresh["history"] == [] and fresh["path"] == []


def test_unknown_keys_are_kept_at_every_level() -> None:
    raw = {"components": {"begin": {"obj": {"component_name": "Begin", "params": {"x_ui": 1}, "odd": True},
                                    "downstream": [], "upstream": [], "position": {"x": 3}}},
           "messages": [], "task_id": "t", "brand_new": {"a": 1}}
    canvas, state = load_with_state(copy.deepcopy(raw))
    assert canvas.components["begin"].extra == {"position": {"x": 3}}
    assert canvas.components["begin"].obj_extra == {"odd": True}
    assert to_v1(canvas, state) == raw


def test_a_native_v2_canvas_loads_and_converts_to_v1() -> None:
    v2 = {"version": 2, "components": {
        "begin": {"name": "Begin", "downstream": ["Message:M"], "params": {}},
        "Message:M": {"name": "Message", "upstream": ["begin"], "params": {"content": ["hi"]}}}}
    canvas = load_canvas(v2)
    assert validate(canvas) == []
    v1 = to_v1(canvas, SessionState())
    assert v1["components"]["Message:M"] == {"obj": {"component_name": "Message", "params": {"content": ["hi"]}},
                                             "downstream": [], "upstream": ["begin"]}
    assert to_v2_dict(load_canvas(v1)) == to_v2_dict(load_canvas(to_v1(load_canvas(v1))))


@pytest.mark.parametrize("doc, where", [
    ("not json", "<document>"),
    ("[1, 2]", "<document>"),
    ({"nothing": 1}, "components"),
    ({"components": {"begin": {"downstream": []}}}, "begin.obj"),
    ({"components": {"begin": {"obj": {"params": {}}}}}, "begin.obj.component_name"),
    ({"components": {"begin": {"obj": {"component_name": "Begin", "params": []}}}}, "begin.obj.params"),
    ({"components": {"begin": {"obj": {"component_name": "Begin"}, "downstream": "x"}}}, "begin.downstream"),
    ({"version": 2, "components": {"begin": {"params": {}}}}, "components.begin.name"),
])
def test_malformed_documents_fail_naming_where(doc: object, where: str) -> None:
    with pytest.raises(DslError) as exc:
        load_canvas(doc if isinstance(doc, str) else json.dumps(doc))
    assert exc.value.where == where
