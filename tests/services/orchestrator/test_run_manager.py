"""The run manager's event pump: every event reaches a slow reader, and the end is never lost."""

from __future__ import annotations

import asyncio

from services.orchestrator.run_manager import _QUEUE_SIZE, _next


async def test_a_reader_that_pauses_gets_every_event_and_then_the_end():
    queue: asyncio.Queue = asyncio.Queue(_QUEUE_SIZE)
    total = _QUEUE_SIZE + 44

    async def produce() -> None:
        for i in range(total):
            await queue.put(i)

    task = asyncio.create_task(produce())
    got = [await _next(queue, task) for _ in range(10)]
    await asyncio.sleep(0.3)  # the reader stalls while the producer fills the queue and waits
    while (item := await _next(queue, task)) is not None:
        got.append(item)
    assert got == list(range(total)) and task.done()


async def test_a_producer_that_dies_ends_the_stream_after_what_it_sent():
    queue: asyncio.Queue = asyncio.Queue(_QUEUE_SIZE)

    async def produce() -> None:
        await queue.put("a")
        raise RuntimeError("engine bug")

    task = asyncio.create_task(produce())
    assert await _next(queue, task) == "a"
    assert await asyncio.wait_for(_next(queue, task), 30) is None  # a lost end of stream hangs
    assert isinstance(task.exception(), RuntimeError)
