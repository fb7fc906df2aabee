"""Prometheus metrics of the runs themselves (per RPC counts and latencies come from services/common/metrics.py):
components by type and outcome with their time, and runs by final status. Recorded by the run manager from the
events it already handles, never inside the engine's per-node path."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

COMPONENTS = Counter("trellis_component_runs_total", "Components that finished, by type and outcome (succeeded, failed)",
                     ["component_type", "outcome"])
COMPONENT_SECONDS = Histogram("trellis_component_seconds", "Time a component took, until its streamed output ended",
                              ["component_type"],
                              buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
RUNS = Counter("trellis_runs_total", "Runs that ended, by status (succeeded, failed, cancelled, waiting_for_user)",
               ["status"])

_children: dict[tuple[str, bool], tuple] = {}


def component_finished(component_type: str, failed: bool, elapsed_s: float) -> None:
    """One finished component; label lookups are cached (they cost more than the increment)."""
    key = (component_type, failed)
    pair = _children.get(key)
    if pair is None:
        pair = _children[key] = (COMPONENTS.labels(component_type, "failed" if failed else "succeeded"),
                                 COMPONENT_SECONDS.labels(component_type))
    pair[0].inc()
    pair[1].observe(elapsed_s)
