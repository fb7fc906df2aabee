"""How many timers the running event loop arms inside a block (every asyncio timeout, sleep and call_later goes
through `loop.call_at`): for tests that a hot path arms one per stream or per wait, not one per item.

    with timers_armed() as armed:
        ...
    assert armed.count < 5
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass
class Armed:
    count: int = 0


@contextmanager
def timers_armed() -> Iterator[Armed]:
    loop = asyncio.get_running_loop()
    armed = Armed()
    call_at = loop.call_at

    def counting_call_at(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.count += 1
        return call_at(*args, **kwargs)

    loop.call_at = counting_call_at  # type: ignore[method-assign]
    try:
        yield armed
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]
