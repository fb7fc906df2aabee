"""The event loop every Trellis process runs on: uvloop (libuv's loop, written in Cython) unless
TRELLIS_UVLOOP=0, else asyncio's own. Under load a process's time goes to loop callbacks (each delta wakes a
few tasks in every process it crosses, each gRPC completion is one more): uvloop runs the same callbacks for
less CPU (measured in docs/streaming.md, "Where a burst's last first token goes")."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

from services.common.config import env_bool

T = TypeVar("T")


def uses_uvloop() -> bool:
    return env_bool("TRELLIS_UVLOOP", True)


def new_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the kind this process runs on."""
    if not uses_uvloop():
        return asyncio.new_event_loop()
    import uvloop  # only where it runs: a process on asyncio's loop never loads it

    return uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on this process's loop."""
    with asyncio.Runner(loop_factory=new_loop) as runner:
        return runner.run(main)
