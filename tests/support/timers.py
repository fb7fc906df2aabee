"""How many timers the running event loop arms inside a block (`loop.call_at` and `loop.call_later`: every
asyncio timeout and sleep, aiohttp's read timeouts): for tests that a hot path arms one per stream or per wait,
not one per item.

    with timers_armed() as armed:
        ...
    assert armed.count < 5
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class Armed:
    count: int = 0
    callbacks: list[Any] = field(default_factory=list)  # what each timer calls


@contextmanager
def timers_armed() -> Iterator[Armed]:
    loop = asyncio.get_running_loop()
    armed = Armed()
    call_at, call_later = loop.call_at, loop.call_later
    inside = [0]  # one loop's call_at goes through its call_later (uvloop), the other's the other way (asyncio)

    def counting(original: Any) -> Any:
        def arm(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            if not inside[0]:
                armed.count += 1
                armed.callbacks.append(args[1] if len(args) > 1 else kwargs.get("callback"))
            inside[0] += 1
            try:
                return original(*args, **kwargs)
            finally:
                inside[0] -= 1
        return arm

    loop.call_at = counting(call_at)  # type: ignore[method-assign]
    loop.call_later = counting(call_later)  # type: ignore[method-assign]
    try:
        yield armed
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]
        loop.call_later = call_later  # type: ignore[method-assign]
