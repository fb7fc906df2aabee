"""Per-component time limits for one run, with a single timer instead of one per node.

`asyncio.timeout()` around every node costs a TimerHandle pushed into the loop's heap (and left
there, cancelled, until the heap is compacted): measurable next to a no-op component. Here a run keeps
one timer armed for the earliest deadline; when it fires, the nodes past their deadline are cancelled
and reported as timed out (`expired`), like `asyncio.timeout` does with `uncancel()`.
"""
from __future__ import annotations

import asyncio
from typing import Any


class Watchdog:
    __slots__ = ("_loop", "_running", "_handle", "_when", "expired")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._running: dict[Any, tuple[float, asyncio.Task[Any]]] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0
        self.expired: set[Any] = set()

    def arm(self, key: Any, timeout_s: float, task: asyncio.Task[Any]) -> None:
        deadline = self._loop.time() + timeout_s
        self._running[key] = (deadline, task)
        if self._handle is None or deadline < self._when:
            self._schedule(deadline)

    def disarm(self, key: Any) -> bool:
        """Stop watching `key`. True when it timed out and no other cancellation is pending:
        the caller then turns the CancelledError into a TimeoutError."""
        entry = self._running.pop(key, None)
        if key in self.expired:
            self.expired.discard(key)
            return entry is not None and entry[1].uncancel() == 0
        return False

    def _schedule(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        now = self._loop.time()
        nxt = None
        for key, (deadline, task) in list(self._running.items()):
            if deadline <= now:
                if key not in self.expired:
                    self.expired.add(key)
                    task.cancel()
            elif nxt is None or deadline < nxt:
                nxt = deadline
        if nxt is not None:
            self._schedule(nxt)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._running.clear()
