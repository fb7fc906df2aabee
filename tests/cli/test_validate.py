"""`trellis validate FILE` as a user runs it: exit code and one line per problem naming component and field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trellis_cli", "validate", str(path)], capture_output=True, text=True, timeout=60)


def _canvas(components: dict) -> dict:
    return {"components": components, "path": [], "history": [], "retrieval": []}


def test_valid_canvas_exits_zero(tmp_path):
    dsl = _canvas({
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Message:Out"], "upstream": []},
        "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["{sys.query}"]}},
                        "downstream": [], "upstream": ["begin"]},
    })
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(dsl))
    result = _validate(path)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_problems_name_component_and_field(tmp_path):
    dsl = _canvas({
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Switch:S"], "upstream": []},
        "Switch:S": {"obj": {"component_name": "Switch", "params": {
            "conditions": [{"items": [{"cpn_id": "Ghost:X@out", "operator": "=", "value": "1"}], "to": ["Message:Out"]}]}},
            "downstream": ["Message:Out"], "upstream": ["begin"]},
        "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["hi"]}}, "downstream": [], "upstream": ["Switch:S"]},
        "Teleport:T": {"obj": {"component_name": "Teleport", "params": {}}, "downstream": [], "upstream": []},
    })
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dsl))
    result = _validate(path)
    assert result.returncode == 1
    err = result.stderr
    assert "Traceback" not in err
    assert "Switch:S" in err and "end_cpn_ids" in err
    assert "Ghost:X" in err
    assert "Teleport:T" in err and "component_name" in err


def test_broken_json_is_one_clear_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"components": ')
    result = _validate(path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "JSON" in result.stderr


def test_every_shipped_agent_template_is_valid():
    templates = Path(__file__).resolve().parents[1] / "data" / "templates"
    for name in ("user_interaction.json", "deep_research.json", "text2sql_data_expert.json"):
        result = _validate(templates / name)
        assert result.returncode == 0, (name, result.stderr)


def test_a_canvas_with_an_unknown_component_says_which(tmp_path):
    canvas = tmp_path / "canvas.json"
    canvas.write_text(json.dumps({"components": {
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Teleport:X"], "upstream": []},
        "Teleport:X": {"obj": {"component_name": "Teleport", "params": {}}, "downstream": [], "upstream": ["begin"]}}}))
    result = _validate(canvas)
    assert result.returncode == 1
    assert "Teleport:X" in result.stderr and "unknown component_name 'Teleport'" in result.stderr


def test_every_example_canvas_is_valid():
    for path in sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.json")):
        result = _validate(path)
        assert result.returncode == 0, (path.name, result.stderr)
