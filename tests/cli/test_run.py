"""`trellis run FILE` against a real orchestrator: streamed answer, --jsonl events, clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from tests.support.net import free_port


CANVAS = {
    "components": {
        "begin": {"obj": {"component_name": "Begin", "params": {"inputs": {
            "name": {"key": "name", "name": "name", "type": "line", "optional": False, "value": ""}}}},
            "downstream": ["Message:Out"], "upstream": []},
        "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["Hi {begin@name}, you asked: {sys.query}"]}},
                        "downstream": [], "upstream": ["begin"]},
    },
    "history": [], "path": [], "retrieval": [],
}


async def _trellis(addr: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "TRELLIS_ORCHESTRATOR_ADDR": addr}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trellis_cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_run_prints_the_answer(orchestrator_addr, tmp_path):
    path = tmp_path / "canvas.json"
    path.write_text(json.dumps(CANVAS))
    code, out, err = await _trellis(orchestrator_addr, "run", str(path), "--query", "the time", "--input", "name=Ada")
    assert code == 0, err
    assert out.strip() == "Hi Ada, you asked: the time"


async def test_run_jsonl_prints_every_event_as_json(orchestrator_addr, tmp_path):
    path = tmp_path / "canvas.json"
    path.write_text(json.dumps(CANVAS))
    code, out, err = await _trellis(orchestrator_addr, "run", str(path), "-q", "x", "-i", "name=Bo", "--jsonl")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert "run_started" in events[0] and "run_finished" in events[-1]
    finished = [e for e in events if "node_finished" in e and e["node_id"] == "begin"][0]
    assert finished["node_finished"]["outputs"]["name"] == "Bo"  # *_json fields decoded


async def test_run_without_orchestrator_is_one_clear_line(tmp_path):
    path = tmp_path / "canvas.json"
    path.write_text(json.dumps(CANVAS))
    code, out, err = await _trellis(f"127.0.0.1:{free_port()}", "run", str(path), "-q", "x")
    assert code == 1
    assert "no orchestrator at" in err and "Traceback" not in err


async def test_run_invalid_canvas_reports_the_component(orchestrator_addr, tmp_path):
    bad = json.loads(json.dumps(CANVAS))
    bad["components"]["Message:Out"]["upstream"] = ["Nowhere:X"]
    bad["components"]["Message:Out"]["obj"]["params"]["content"] = ["{Nowhere:X@out}"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    code, out, err = await _trellis(orchestrator_addr, "run", str(path), "-q", "x")
    assert code == 1
    assert "INVALID_ARGUMENT" in err and "Nowhere:X" in err and "Traceback" not in err
