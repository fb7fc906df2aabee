"""The runs this replica drives right now: one pump each, and the ends still being stored."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from services.orchestrator.runs.pump import Pump


class LocalRuns:
    def __init__(self, on_add: Callable[[Pump], None] | None = None) -> None:
        """`on_add(pump)`: told of every run that starts here, however it started (the run manager binds it to
        what it holds of its tenant's limits)."""
        self._pumps: dict[str, Pump] = {}
        self._ending: set[asyncio.Task] = set()  # runs' ends on their way to Redis (shutdown waits for them)
        self._on_add = on_add

    def add(self, pump: Pump) -> None:
        self._pumps[pump.run_id] = pump
        pump.task.add_done_callback(lambda _: self._pumps.pop(pump.run_id, None))
        if self._on_add is not None:
            self._on_add(pump)

    def get(self, run_id: str) -> Pump | None:
        return self._pumps.get(run_id)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._pumps

    def __len__(self) -> int:
        return len(self._pumps)

    def __iter__(self) -> Iterator[Pump]:
        return iter(list(self._pumps.values()))

    def ids(self) -> list[str]:
        return list(self._pumps)

    def ending(self, task: asyncio.Task) -> None:
        """Keep the task that stores a run's end until it is done."""
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Shutdown: cancel every run here and let each end reach Redis, for at most `timeout_s`."""
        for pump in self:
            pump.cancel()
        pending = [*(p.task for p in self), *self._ending]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
