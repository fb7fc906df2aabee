"""The one way a test waits for a condition that the code under test makes true in its own time: `eventually`
polls `check` (a plain or async callable) until it returns something truthy and returns that; `eventually_sync`
is its twin for code that cannot await (a subprocess, a blocking client). Both give up only after `timeout`
seconds, a bound for a hang rather than a deadline: a slow or busy machine takes longer and still passes. On
giving up they fail with `what` and the last value (or tolerated exception) seen.

    info = await eventually(lambda: finished(stub, run_id), what="the run's end")
    eventually_sync(lambda: healthz(port) == 200, what="the stack", ignoring=(OSError,))

A wait for an event that the code under test signals itself (an asyncio.Event set by a fake, a future, a line
read from a stream) needs no polling: await it. Neither replaces that, nor orders concurrent steps by time.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from typing import Awaitable, Callable, TypeVar, Union

T = TypeVar("T")

_FIRST_S, _MOST_S = 0.005, 0.1  # between polls: short at first, then at most this


async def eventually(check: Callable[[], Union[T, Awaitable[T]]], *, what: str = "the condition",
                     timeout: float = 60.0, ignoring: tuple[type[BaseException], ...] = ()) -> T:
    deadline = time.monotonic() + timeout
    pause, last = _FIRST_S, None
    while True:
        try:
            last = check()
            if inspect.isawaitable(last):
                last = await last
        except ignoring as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")
        await asyncio.sleep(pause)
        pause = min(pause * 2, _MOST_S)


def eventually_sync(check: Callable[[], T], *, what: str = "the condition", timeout: float = 60.0,
                    ignoring: tuple[type[BaseException], ...] = ()) -> T:
    deadline = time.monotonic() + timeout
    pause, last = _FIRST_S, None
    while True:
        try:
            last = check()
        except ignoring as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")
        time.sleep(pause)
        pause = min(pause * 2, _MOST_S)

