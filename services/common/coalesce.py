"""Adaptive coalescing of a stream between two hops, the one mechanism every streaming hop uses.

    async for item in coalesce(source, merge):
        await send(item)          # a gRPC write, an HTTP write, a component's handling

A reader task pulls `source` into a small buffer while the consumer sends. When the consumer is idle the
next item goes out the moment it arrives: in a process that is not busy, no timer holds a token back.
Whatever arrives while a send is in flight is merged into the last buffered item (`merge(last, new)`
returns the merged item, or None when the two must stay separate messages), so a slow next hop gets fewer,
larger messages instead of a growing backlog. Order is kept: only neighbours merge, and `merge` decides
what may be joined.

Under load a stream may also pace itself (`Linger`, the llm_gateway's streams, as its `StreamPacing` policy
says: services/common/speed_policies.py): while a process carries many streams at once, each waits a little
after a message before sending the next, so what arrives meanwhile merges too. The first message never waits,
nor does the last: the source's end cuts the wait short.

While its consumer lingers, a source that buffers what arrives (an HTTP body) may also wait before its next
read (`read_pause()`): what arrives meanwhile is then read, parsed and passed on once, not chunk by chunk.

The buffer holds at most `max_pending` unmergeable items; beyond that the reader stops reading, so flow
control still reaches the producer. An error of `source` reaches the consumer after the items read before
it. Closing the consumer (break, cancel, client gone) cancels the reader and closes `source`, and waits
for both, so the source's own clean-up (persisting a turn, closing an upstream request) has run on return.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import AsyncGenerator, AsyncIterator, Callable, TypeVar

from services.common.speed_policies import StreamPacing

T = TypeVar("T")

MAX_PENDING = 64

# In the task that reads a coalesced source: [the loop time until which its consumer lingers, or 0]
_LINGERING_UNTIL: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("lingering_until", default=None)


def read_pause() -> float:
    """For a source being read by `coalesce`: how long its consumer still lingers, in seconds (0: it does not).
    A source that buffers what arrives may wait that long before its next read, so that it reads, parses and
    passes on everything that came meanwhile at once. It must stop waiting when its input ends, or the end of
    the stream would wait too."""
    until = _LINGERING_UNTIL.get()
    if until is None or not until[0]:
        return 0.0
    return until[0] - asyncio.get_running_loop().time()


class Linger:
    """The streams of one process that pace themselves together: it counts them, and asks its `StreamPacing`
    how long a stream waits after a message before its next one, at the count it has now. One per process
    (the llm_gateway's), shared by all its streams."""

    def __init__(self, pacing: StreamPacing) -> None:
        self.pacing = pacing
        self.streams = 0  # streams passing through now

    def wait_s(self) -> float:
        """How long a stream waits after a message before its next one now (0: it does not)."""
        return self.pacing.wait_s(self.streams)


def coalesce(
    source: AsyncIterator[T], merge: Callable[[T, T], T | None], *, max_pending: int = MAX_PENDING,
    linger: Linger | None = None, ready: Callable[[], bool] | None = None,
) -> AsyncGenerator[T, None]:
    """`source`'s items, neighbours merged while the consumer sends (module docstring). `ready`: for a source
    that buffers what arrives itself and says whether its next item is there already (`_merged_in_place`)."""
    if ready is not None:
        return _merged_in_place(source, merge, ready, max_pending)
    return _with_reader(source, merge, max_pending, linger)


async def _with_reader(source: AsyncIterator[T], merge: Callable[[T, T], T | None], max_pending: int,
                       linger: Linger | None) -> AsyncGenerator[T, None]:
    # A list, not a deque: it holds a few items at most (MAX_PENDING), and a deque's first block is 0.7 KB per
    # stream held (services/common/inbox.py says why that counts).
    pending: list[T] = []
    loop = asyncio.get_running_loop()
    # [consumer waiting for an item, reader waiting for room, consumer lingering]: futures, or None
    waiters: list[asyncio.Future | None] = [None, None, None]
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
                wake(2)  # the end is sent at once

    lingering_until = [0.0]
    context = contextvars.copy_context()
    context.run(_LINGERING_UNTIL.set, lingering_until)
    reader = loop.create_task(read(), context=context)
    if linger is not None:
        linger.streams += 1
    try:
        while True:
            if pending:
                item = pending.pop(0)
                if len(pending) < max_pending:
                    wake(1)
                sent = loop.time()
                yield item
                # What queued up during the send goes at once; after that, a busy process waits a little.
                if linger is not None and not pending and not outcome and (wait := linger.wait_s()) > 0:
                    waiters[2] = loop.create_future()
                    timer = loop.call_at(sent + wait, wake, 2)
                    lingering_until[0] = sent + wait
                    try:
                        await waiters[2]
                    finally:
                        lingering_until[0] = 0.0
                        timer.cancel()
                continue
            if outcome:
                if outcome[0] is not None:
                    raise outcome[0]
                return
            waiters[0] = loop.create_future()
            await waiters[0]
    finally:
        if linger is not None:
            linger.streams -= 1
        if not reader.done():
            reader.cancel()
        try:
            await reader
        except asyncio.CancelledError:
            # The reader's own cancellation is expected; our task's (client gone) must still propagate.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise



async def _merged_in_place(source: AsyncIterator[T], merge: Callable[[T, T], T | None], ready: Callable[[], bool],
                           most: int) -> AsyncGenerator[T, None]:
    """`coalesce` for a source that buffers what arrives itself and can say whether its next item is there
    already (`ready()`: a turn's messages, services/common/turns/client.py): no reader task, no buffer of its
    own. When the consumer asks for its next item, what the source holds by then is merged into it (at most `most`
    items into one: a merge copies what it joins, so a client that read nothing for a long while gets its
    backlog in several events rather than in one built by thousands of ever larger copies), as a reader would
    have merged it meanwhile; an error comes after the items before it. A held stream so costs a task, its
    coroutines and a buffer less (docs/speed-policies.md, "Many held streams")."""
    ahead: list[T] = []  # taken while merging and not mergeable: the next item
    error: BaseException | None = None
    ended = False  # the source's end was met while merging: after the item, nothing more
    try:
        while True:
            if ahead:
                item = ahead.pop()
            elif error is not None:
                raise error
            elif ended:
                return
            else:
                try:
                    item = await anext(source)
                except StopAsyncIteration:
                    return
            merged_in = 1
            while not ahead and error is None and not ended and merged_in < most and ready():
                try:
                    following = await anext(source)
                except StopAsyncIteration:
                    ended = True
                    break
                except Exception as exc:  # noqa: BLE001 (raised once the items before it are sent)
                    error = exc
                    break
                merged = merge(item, following)
                if merged is None:
                    ahead.append(following)
                else:
                    item, merged_in = merged, merged_in + 1
            yield item
    finally:
        close = getattr(source, "aclose", None)  # an async generator: its own clean-up runs now
        if close is not None:
            await close()
