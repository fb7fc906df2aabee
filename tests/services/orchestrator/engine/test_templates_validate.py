"""Validation over every RAGFlow template and DSL example (tests/data, see NOTICE.md): each agent canvas is
accepted. What is refused is named here with the reason, so a change either way shows up:
- the ingestion pipelines ("canvas_category": "dataflow_canvas", and compiler.json): RAGFlow's document
  pipelines (File, Parser, Extractor...), not agent canvases, which this engine does not run;
- exesql.json and headhunter_zh.json: pre-0.20 canvases built on `Answer`, which RAGFlow itself no longer runs.
"""
from __future__ import annotations

import json

import pytest

from services.orchestrator.engine.validate import validate_file
from tests.support.data import DATA

CANVASES = sorted([*DATA.glob("templates/*.json"), *DATA.glob("dsl_examples/*.json")])
PRE_0_20 = {"exesql.json", "headhunter_zh.json"}


def is_pipeline(path) -> bool:
    doc = json.loads(path.read_text(encoding="utf-8"))
    components = (doc.get("dsl") or doc).get("components") or {}
    return doc.get("canvas_category") == "dataflow_canvas" or any(
        c.get("obj", {}).get("component_name") == "File" for c in components.values())


AGENTS = [p for p in CANVASES if p.name not in PRE_0_20 and not is_pipeline(p)]


def test_the_copies_cover_every_template_and_example():
    assert len(list(DATA.glob("templates/*.json"))) == 19 and len(list(DATA.glob("dsl_examples/*.json"))) == 8
    assert len(AGENTS) == 15 + 6


@pytest.mark.parametrize("path", AGENTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_agent_canvas_is_accepted(path):
    assert [str(i) for i in validate_file(path)] == []


@pytest.mark.parametrize("path", [p for p in CANVASES if p.name in PRE_0_20], ids=lambda p: p.name)
def test_pre_0_20_canvases_are_refused_for_their_answer_component(path):
    issues = validate_file(path)
    assert issues and any("unknown component_name 'Answer'" in i.message for i in issues)


@pytest.mark.parametrize("path", [p for p in CANVASES if is_pipeline(p)], ids=lambda p: p.name)
def test_ingestion_pipelines_are_refused_naming_their_components(path):
    messages = [i.message for i in validate_file(path)]
    assert any("unknown component_name" in m for m in messages)
