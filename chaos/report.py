"""The chaos report: what each fault met and what became of the runs it hit, then each invariant's count; printed
as tables and written as JSON (bench/results/chaos.json by default)."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from tabulate import tabulate

from chaos.faults import Struck
from chaos.invariants import Check, StoredRun
from chaos.load import RunSeen


def _hit(struck: Struck, seen: list[RunSeen]) -> list[RunSeen]:
    """The runs in flight while the fault lasted (from its strike until the stack was whole again)."""
    return [s for s in seen if s.run_id and s.started_at <= struck.until and (s.ended_at or float("inf")) >= struck.at]


def _short(error: str) -> str:
    return error.split(": ", 1)[-1][:70] if error else ""


def fault_rows(struck: list[Struck], seen: list[RunSeen], stored: dict[str, StoredRun], checks: list[Check],
               t0: float) -> list[dict]:
    rows = []
    for f in struck:
        hit = _hit(f, seen)
        broke = {c.name: n for c in checks if (n := sum(s.run_id in c.runs for s in hit))}
        statuses = collections.Counter(stored[s.run_id].status for s in hit)
        errors = collections.Counter(_short(stored[s.run_id].error) for s in hit if stored[s.run_id].error)
        rows.append({
            "fault": f.fault, "target": f.target, "at_s": round(f.at - t0, 1),
            "recovered_after_s": round(f.until - f.at, 1), "found": f.notes, "runs_hit": len(hit),
            "succeeded": statuses["succeeded"], "failed": statuses["failed"], "cancelled": statuses["cancelled"],
            "not_terminal": len(hit) - statuses["succeeded"] - statuses["failed"] - statuses["cancelled"],
            "taken_over": sum(stored[s.run_id].attempts > 1 for s in hit),
            "clients_rejoined": sum(s.rejoins > 0 for s in hit),
            "errors": dict(errors.most_common(3)), "violations": broke,
        })
    return rows


def totals(seen: list[RunSeen], stored: dict[str, StoredRun]) -> dict[str, Any]:
    runs = [s for s in seen if s.run_id]
    statuses = collections.Counter(stored[s.run_id].status for s in runs)
    return {"turns": len(seen), "runs_seen": len(runs), "statuses": dict(statuses),
            "taken_over": sum(stored[s.run_id].attempts > 1 for s in runs),
            "client_outcomes": dict(collections.Counter(s.outcome for s in seen)),
            "clients_rejoined": sum(s.rejoins > 0 for s in runs),
            "refused": dict(collections.Counter(s.error[:90] for s in seen if s.outcome == "refused").most_common(4)),
            "components_restarted_on_screen": sum(len(s.restarted) for s in runs)}


def render(report: dict[str, Any]) -> str:
    faults = [[r["fault"], r["target"], r["at_s"], r["recovered_after_s"], r["runs_hit"], r["succeeded"], r["failed"],
               r["cancelled"], r["not_terminal"], r["taken_over"], r["clients_rejoined"],
               ", ".join(f"{k}={v}" for k, v in r["violations"].items()) or "-",
               ", ".join(f"{k}={v}" for k, v in r["found"].items())] for r in report["faults"]]
    checks = [[c["name"], c["checked"], c["violations"], c["what"]] for c in report["invariants"]]
    t = report["totals"]
    lines = [
        f"chaos: seed {report['seed']}, {report['config']['clients']} clients, "
        f"{report['config']['replicas']} orchestrator replicas, lease {report['config']['lease_s']:g} s, "
        f"{report['duration_s']:.0f} s",
        tabulate(faults, headers=["fault", "target", "at s", "back s", "hit", "ok", "failed", "cancelled",
                                  "open", "taken over", "rejoined", "broke", "found"]),
        "",
        tabulate(checks, headers=["invariant", "checked", "violations", "what"]),
        "",
        f"runs seen {t['runs_seen']}: {t['statuses']}; taken over {t['taken_over']}; clients that rejoined "
        f"{t['clients_rejoined']}; client outcomes {t['client_outcomes']}",
    ]
    if report["claims"]["max_s"] is not None:
        lines.append(f"session claims after their owner died: {report['claims']['count']}, at most "
                     f"{report['claims']['max_s']:.1f} s")
    if t["refused"]:
        lines.append("  turns refused before a run started: " + "; ".join(f"{n}x {e}" for e, n in t["refused"].items()))
    for r in report["faults"]:
        if r["errors"]:
            lines.append(f"  {r['fault']}: " + "; ".join(f"{n}x {e}" for e, n in r["errors"].items()))
    for c in report["invariants"]:
        for example in c["examples"]:
            lines.append(f"  VIOLATION {c['name']}: {example}")
    return "\n".join(lines)


def build(*, seed: int, config: dict[str, Any], duration_s: float, struck: list[Struck], seen: list[RunSeen],
          stored: dict[str, StoredRun], checks: list[Check], claim_seconds: list[float], t0: float,
          extra: dict[str, Any]) -> dict[str, Any]:
    return {"seed": seed, "config": config, "duration_s": round(duration_s, 1),
            "faults": fault_rows(struck, seen, stored, checks, t0), "invariants": [c.as_dict() for c in checks],
            "totals": totals(seen, stored),
            "claims": {"count": len(claim_seconds), "max_s": round(max(claim_seconds), 2) if claim_seconds else None},
            "violations": sum(c.violations for c in checks), **extra}


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
