"""Prometheus metrics of the runs themselves (per RPC counts and latencies come from services/common/metrics.py):
components by type and outcome with their time, and runs by final status. Recorded by the run manager from the
events it already handles, never inside the engine's per-node path. And per tenant (docs/limits.md): runs admitted,
refused by limit, running and waiting here, streams held here, LLM tokens used."""

from __future__ import annotations

import weakref
from typing import Any, Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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


# ---- per tenant (services/orchestrator/limits/): admitted, refused by limit, LLM tokens; running, waiting and
# held streams read from each replica's limits gate when Prometheus scrapes.
TENANT_ADMITTED = Counter("trellis_tenant_runs_admitted_total", "Runs admitted past the tenant's limits, by tenant",
                          ["tenant"])
TENANT_REFUSED = Counter("trellis_tenant_refused_total",
                         "Runs and streams refused, by tenant and the limit hit (concurrent_runs, runs_per_second, "
                         "tokens_per_minute, held_streams, capacity)", ["tenant", "limit"])
TENANT_TOKENS = Counter("trellis_tenant_llm_tokens_total", "LLM tokens (prompt and completion) the tenant's runs used",
                        ["tenant"])
_admitted: dict[str, Any] = {}
_tokens: dict[str, Any] = {}


def tenant_admitted(tenant: str) -> None:
    child = _admitted.get(tenant)
    if child is None:
        child = _admitted[tenant] = TENANT_ADMITTED.labels(tenant)
    child.inc()


def tenant_refused(tenant: str, limit: str) -> None:
    TENANT_REFUSED.labels(tenant, limit).inc()


def tenant_tokens(tenant: str, tokens: int) -> None:
    child = _tokens.get(tenant)
    if child is None:
        child = _tokens[tenant] = TENANT_TOKENS.labels(tenant)
    child.inc(tokens)


class _TenantGauges(Collector):
    """trellis_tenant_runs_running, trellis_tenant_runs_waiting, trellis_tenant_streams_held: summed over the
    gates of this process (one per orchestrator it runs), read at each scrape."""

    def __init__(self) -> None:
        self.gates: weakref.WeakSet = weakref.WeakSet()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        names = (("trellis_tenant_runs_running", "Runs of the tenant running on this replica"),
                 ("trellis_tenant_runs_waiting", "Runs of the tenant waiting for a slot of this replica's capacity"),
                 ("trellis_tenant_streams_held", "Run and WatchRun streams of the tenant held open on this replica"))
        families = [GaugeMetricFamily(name, doc, labels=["tenant"]) for name, doc in names]
        totals: dict[str, list[int]] = {}
        for gate in list(self.gates):
            for tenant, *counts in gate.tenant_counts():
                row = totals.setdefault(tenant, [0, 0, 0])
                for i, n in enumerate(counts):
                    row[i] += n
        for tenant, row in sorted(totals.items()):
            for family, n in zip(families, row):
                family.add_metric([tenant], n)
        yield from families


_GAUGES = _TenantGauges()
REGISTRY.register(_GAUGES)


def watch_tenants(gate: Any) -> None:
    """Report this gate's per-tenant counts (`gate.tenant_counts()`) at each scrape, for as long as it lives."""
    _GAUGES.gates.add(gate)
