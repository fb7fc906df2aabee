"""A run that writes faster than its reader: the service stops reading its pipes past the output cap, so it
never buffers much more than the cap however slow the consumer is."""

from __future__ import annotations

import asyncio

from services.sandbox._process import STDERR, STDOUT, _OutputBudget, _Reader


class FakeTransport:
    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True


async def test_reading_pauses_once_stdout_and_stderr_together_pass_the_cap():
    queue: asyncio.Queue = asyncio.Queue()
    budget = _OutputBudget(cap=10_000)
    out, err = _Reader(STDOUT, queue, budget), _Reader(STDERR, queue, budget)
    t_out, t_err = FakeTransport(), FakeTransport()
    out.connection_made(t_out)
    err.connection_made(t_err)
    for _ in range(2):
        out.data_received(b"x" * 4096)
    assert not t_out.paused
    err.data_received(b"y" * 4096)  # 12,288 bytes in all: past the cap
    assert t_err.paused
    out.data_received(b"x" * 4096)
    assert t_out.paused
    assert queue.qsize() == 4  # nothing is dropped: the executor sees the crossing and stops the run
