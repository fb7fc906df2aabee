"""Adaptive coalescing of a stream between two hops, the one mechanism every streaming hop uses.

    async for item in coalesce(source, merge):
        await send(item)          # a gRPC write, an HTTP write, a component's handling

A reader task pulls `source` into a small buffer while the consumer sends. When the consumer is idle the
next item goes out the moment it arrives: no timer ever holds a token back. Whatever arrives while a send
is in flight is merged into the last buffered item (`merge(last, new)` returns the merged item, or None
when the two must stay separate messages), so a slow next hop gets fewer, larger messages instead of a
growing backlog. Order is kept: only neighbours merge, and `merge` decides what may be joined.

The buffer holds at most `max_pending` unmergeable items; beyond that the reader stops reading, so flow
control still reaches the producer. An error of `source` reaches the consumer after the items read before
it. Closing the consumer (break, cancel, client gone) cancels the reader and closes `source`, and waits
for both, so the source's own clean-up (persisting a turn, closing an upstream request) has run on return.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import AsyncIterator, Callable, TypeVar

T = TypeVar("T")

MAX_PENDING = 64


async def coalesce(
    source: AsyncIterator[T], merge: Callable[[T, T], T | None], *, max_pending: int = MAX_PENDING
) -> AsyncIterator[T]:
    pending: deque[T] = deque()
    loop = asyncio.get_running_loop()
    # [consumer waiting for an item, reader waiting for room]: futures, or None when nobody waits
    waiters: list[asyncio.Future | None] = [None, None]
    outcome: list[BaseException | None] = []  # set once the reader ended: [None] or [its error]

    def wake(which: int) -> None:
        fut = waiters[which]
        if fut is not None:
            waiters[which] = None
            if not fut.done():
                fut.set_result(None)

    async def read() -> None:
        error: BaseException | None = None
        try:
            async for item in source:
                if pending:
                    merged = merge(pending[-1], item)
                    if merged is not None:
                        pending[-1] = merged
                        continue
                pending.append(item)
                wake(0)
                while len(pending) >= max_pending:
                    waiters[1] = loop.create_future()
                    await waiters[1]
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer, which re-raises it)
            error = exc
        finally:
            close = getattr(source, "aclose", None)  # an async generator: its own clean-up runs now
            try:
                if close is not None:
                    await close()
            finally:
                outcome.append(error)
                wake(0)

    reader = asyncio.ensure_future(read())
    try:
        while True:
            if pending:
                item = pending.popleft()
                if len(pending) < max_pending:
                    wake(1)
                yield item
                continue
            if outcome:
                if outcome[0] is not None:
                    raise outcome[0]
                return
            waiters[0] = loop.create_future()
            await waiters[0]
    finally:
        if not reader.done():
            reader.cancel()
        try:
            await reader
        except asyncio.CancelledError:
            # The reader's own cancellation is expected; our task's (client gone) must still propagate.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
