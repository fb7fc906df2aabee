"""A run cancelled while its process starts (its caller left: a client that goes away mid-stream) leaves no file
descriptor behind in the sandbox service: the process is killed, reaped, and its pidfd and pipes closed. Before,
each such run kept the pidfd open for good (the soak saw the service's open files grow by a hundred an hour)."""

from __future__ import annotations

import asyncio
import gc
import os
import sys

from services.sandbox._process import SandboxProcess
from tests.support.waiting import eventually


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_start_cancelled_midway_closes_everything_it_opened():
    async def start_and_cancel() -> None:
        control = os.pipe()
        task = asyncio.ensure_future(SandboxProcess.start(
            [sys.executable, "-c", "import time; time.sleep(30)"], env={}, cwd=None, stdin_data=b"",
            control=control))
        await asyncio.sleep(0)  # it spawned the process and waits on its first pipe
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    await start_and_cancel()  # (the loop's own lazily made fds, once)
    gc.collect()
    before = open_fds()
    for _ in range(5):
        await start_and_cancel()

    def back() -> bool:
        gc.collect()
        return open_fds() <= before

    await eventually(back, what=f"the sandbox's open files back to {before} (now {open_fds()})")
