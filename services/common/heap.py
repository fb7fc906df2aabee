"""The garbage collector of a long-running process, set once it has started, as its `GcPolicy` says
(services/common/speed_policies.py; TRELLIS_GC_POLICY, docs/speed-policies.md).

What start-up allocated (modules, generated protobuf classes, compiled plans, clients) lives as long as the
process: frozen, the collector never walks it again, so a full collection costs the live requests' objects
only. A larger first threshold makes young collections rarer; every one of them walks what a few hundred
requests left, a pause that lands on whichever request is running (the p99 of a closed loop)."""

from __future__ import annotations

import gc

from services.common.speed_policies import GcPolicy


def set_collector(policy: GcPolicy) -> None:
    """Call once, when start-up is over: what exists then is what `freeze_startup_heap` freezes."""
    if policy.freeze_startup_heap:
        gc.collect()
        gc.freeze()
    if policy.young_threshold:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(policy.young_threshold, older, oldest)
