"""The chaos suite's machinery, kept from rotting: `python -m chaos` with one short seeded fault (kill -9 of an
orchestrator replica that owns runs) on the real stack under a little streaming load. The fault must have met
runs, every invariant must have been checked on them, and none broken (`make chaos` runs every fault)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)  # the whole stack starts, a replica dies and comes back: minutes on a busy machine
def test_one_seeded_kill_meets_runs_and_breaks_no_invariant(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    result = subprocess.run(
        [sys.executable, "-m", "chaos", "--faults", "orchestrator_sigkill", "--seed", "7", "--clients", "3",
         "--replicas", "2", "--lease-s", "2", "--warmup-s", "3", "--recovery-s", "5", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert out.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    [fault] = report["faults"]
    assert fault["fault"] == "orchestrator_sigkill" and fault["found"]["runs_owned"] >= 1, fault
    assert fault["runs_hit"] >= 1 and fault["not_terminal"] == 0, fault
    checks = {c["name"]: c for c in report["invariants"]}
    assert set(checks) == {"terminal", "no_rerun", "final_output", "claim_released", "single_writer"}
    assert all(c["checked"] > 0 for c in checks.values()), checks
    assert report["violations"] == 0, result.stdout[-3000:]
    assert result.returncode == 0 and "invariant" in result.stdout
