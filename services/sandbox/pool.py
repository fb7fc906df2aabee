"""A bounded pool of execution slots with a bounded wait queue."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from services.common.errors import ResourceExhausted


class ExecutionPool:
    """`workers` runs at once, `queue` more waiting; one more is refused at once with RESOURCE_EXHAUSTED.

    A slot is an index 0..workers-1: the isolation layer derives the run's uid from it, so two runs that
    overlap in time never share one.
    """

    def __init__(self, workers: int, queue: int) -> None:
        if workers < 1 or queue < 0:
            raise ValueError("sandbox pool: workers must be >= 1 and queue >= 0")
        self.workers, self.queue = workers, queue
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for i in range(workers):
            self._free.put_nowait(i)
        self._waiting = 0

    @property
    def busy(self) -> int:
        return self.workers - self._free.qsize()

    @property
    def waiting(self) -> int:
        return self._waiting

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        if self._free.empty() and self._waiting >= self.queue:
            raise ResourceExhausted(
                f"sandbox: all {self.workers} workers are busy and {self._waiting} executions are queued; retry later"
            )
        self._waiting += 1
        try:
            index = await self._free.get()  # cancellation-safe: a cancelled waiter takes no slot
        finally:
            self._waiting -= 1
        try:
            yield index
        finally:
            self._free.put_nowait(index)
