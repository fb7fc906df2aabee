"""The garbage collector of a long-running service, set once it has started.

What start-up allocated (modules, generated protobuf classes, compiled plans, clients) lives as long as the
process: frozen, the collector never walks it again, so a full collection costs the live requests' objects
only. A larger first threshold makes young collections rarer; every one of them walks what a few hundred
requests left, a pause that lands on whichever request is running (the p99 of a closed loop)."""

from __future__ import annotations

import gc
import os

YOUNG_THRESHOLD = 20_000  # CPython's default is 700


def freeze_startup_heap() -> None:
    if os.environ.get("TRELLIS_GC_TUNING", "1") == "0":
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
