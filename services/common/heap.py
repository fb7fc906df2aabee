"""The garbage collector of a long-running process, set once it has started, as its `GcPolicy` says
(services/common/speed_policies.py; TRELLIS_GC_POLICY, docs/speed-policies.md).

What start-up allocated (modules, generated protobuf classes, compiled plans, clients) lives as long as the
process: frozen, the collector never walks it again, so a full collection costs the live requests' objects
only. A larger first threshold makes young collections rarer; every one of them walks what a few hundred
requests left, a pause that lands on whichever request is running (the p99 of a closed loop). A full
collection at least every so often (`FullCollections`) keeps what the requests left in cycles from piling up
between CPython's own, which that threshold makes rare."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any, Callable

from services.common.speed_policies import GcPolicy


def set_collector(policy: GcPolicy) -> None:
    """Call once, from the process's event loop, when start-up is over: what exists then is what
    `freeze_startup_heap` freezes."""
    if policy.freeze_startup_heap:
        gc.collect()
        gc.freeze()
    if policy.young_threshold:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(policy.young_threshold, older, oldest)
    if policy.full_every_s:
        FullCollections(policy.full_every_s).schedule(asyncio.get_running_loop())


class FullCollections:
    """A full collection whenever `every_s` passed without one. One that CPython ran by itself counts, so under
    a load that makes CPython collect often this does nothing; in between it costs a walk of what is not
    frozen (a few thousand objects when idle)."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self.last = clock()  # when the last full collection ended
        gc.callbacks.append(self._noted)

    def _noted(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            self.last = self._clock()

    def due(self) -> bool:
        return self._clock() - self.last >= self.every_s

    def tick(self) -> None:
        """Collect if one is due (its end is noted by `_noted`)."""
        if self.due():
            gc.collect()

    def schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        def run() -> None:
            self.tick()
            loop.call_later(max(0.0, self.last + self.every_s - self._clock()), run)

        loop.call_later(self.every_s, run)
