"""Deadlines and retries around provider calls, the same for every provider.

- Every call has a budget: the caller's gRPC deadline, capped by `timeout_s` (which also applies when the
  caller set none). A stream must also produce something every `stream_idle_s`, so a stalled upstream
  fails with DEADLINE_EXCEEDED instead of holding the call open.
- Only errors marked `retryable` (rate limits, 5xx, connection failures) are tried again, with exponential
  backoff and jitter, honouring the provider's Retry-After, and never past the budget. A stream is retried
  only before its first delta: once text has reached the caller, a retry would repeat it.
- When the budget or the idle limit runs out, the provider's stream is cancelled, which closes its upstream
  request (see providers/base.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, TypeVar

from services.common.errors import ServiceError
from services.llm_gateway.errors import ProviderTimeout
from services.llm_gateway.models import ChatDelta

log = logging.getLogger(__name__)
_jitter = random.Random()  # its own: retry timing leaves the process's global random state alone

T = TypeVar("T")


@dataclass(frozen=True)
class CallPolicy:
    timeout_s: float = 300.0
    stream_idle_s: float = 60.0
    max_attempts: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0


class Budget:
    """The time left for one call, on the event loop's clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._deadline = asyncio.get_running_loop().time() + seconds

    def remaining(self) -> float:
        return self._deadline - asyncio.get_running_loop().time()


def retry_delay(exc: ServiceError, attempt: int, policy: CallPolicy, budget: Budget) -> float | None:
    """Seconds to wait before try `attempt + 1`, or None when the error must go to the caller now."""
    if not exc.retryable or attempt >= policy.max_attempts:
        return None
    base = min(policy.backoff_max_s, policy.backoff_s * 2 ** (attempt - 1))
    delay = base / 2 + _jitter.uniform(0, base / 2)  # jitter: clients rate-limited together spread out
    hint = getattr(exc, "retry_after_s", None)
    if hint is not None:
        delay = max(delay, min(float(hint), policy.backoff_max_s))
    # Waiting must leave time for the next try to do something.
    return delay if delay < budget.remaining() - 0.05 else None


async def call_with_retries(
    op: Callable[[float], Awaitable[T]],
    *,
    policy: CallPolicy,
    budget: Budget,
    where: str,
    on_retry: Callable[[ServiceError], None] = lambda exc: None,
) -> T:
    """`await op(seconds_left)` within the budget, retrying retryable errors."""
    attempt = 0
    while True:
        attempt += 1
        left = budget.remaining()
        if left <= 0:
            raise ProviderTimeout(f"{where}: deadline of {budget.seconds:.1f}s exceeded")
        try:
            async with asyncio.timeout(left):
                return await op(left)
        except TimeoutError:
            raise ProviderTimeout(f"{where}: no answer within the deadline of {budget.seconds:.1f}s") from None
        except ServiceError as exc:
            delay = retry_delay(exc, attempt, policy, budget)
            if delay is None:
                raise
            on_retry(exc)
            log.warning("%s: attempt %d failed (%s); retrying in %.2fs", where, attempt, exc.message, delay)
            await asyncio.sleep(delay)


class _IdleLimit:
    """Bounds each wait for a stream's next delta with one timer per stream instead of one per delta (a timer
    per token was a tenth of the gateway's work on a stream): the timer is armed for the first wait and, when
    it fires while a later wait is still short of its limit, re-armed for that wait's end. Only a wait that
    lasts its whole limit cancels the waiting task (`fired`)."""

    __slots__ = ("_loop", "task", "_handle", "_deadline", "_waiting", "fired")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.task: asyncio.Task | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._waiting = False
        self.fired = False

    def begin(self, limit: float) -> None:
        self.task = asyncio.current_task()
        self._deadline = self._loop.time() + limit
        self._waiting = True
        handle = self._handle
        # (the deadline of a wait bound by the budget is the budget's end, give or take a rounding error)
        if handle is None or handle.when() > self._deadline + 0.001:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(self._deadline, self._check)

    def end(self) -> None:
        self._waiting = False

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        if not self._waiting:  # the next wait arms the timer again
            return
        if self._loop.time() < self._deadline:
            self._handle = self._loop.call_at(self._deadline, self._check)
            return
        self.fired = True
        assert self.task is not None
        self.task.cancel()


async def stream_with_retries(
    open_stream: Callable[[float], AsyncIterator[ChatDelta]],
    *,
    policy: CallPolicy,
    budget: Budget,
    where: str,
    on_retry: Callable[[ServiceError], None] = lambda exc: None,
) -> AsyncIterator[ChatDelta]:
    """Re-yield `open_stream(seconds_left)` under the budget and the idle limit, retrying until the first delta."""
    attempt = 0
    while True:
        attempt += 1
        stream = open_stream(max(budget.remaining(), 0.001))
        started = False
        idle = _IdleLimit()
        try:
            while True:
                left = budget.remaining()
                wait = min(policy.stream_idle_s, left)
                if wait <= 0:
                    raise ProviderTimeout(f"{where}: deadline of {budget.seconds:.1f}s exceeded")
                idle.begin(wait)
                try:
                    delta = await anext(stream)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if not idle.fired or idle.task is None or idle.task.uncancel() > 0:
                        raise  # a cancel of the call itself
                    if wait < left:
                        raise ProviderTimeout(f"{where}: the stream stalled (nothing for {wait:.1f}s)") from None
                    raise ProviderTimeout(f"{where}: deadline of {budget.seconds:.1f}s exceeded") from None
                finally:
                    idle.end()
                started = True
                yield delta
        except ServiceError as exc:
            delay = None if started else retry_delay(exc, attempt, policy, budget)
            if delay is None:
                raise
            on_retry(exc)
            log.warning("%s: attempt %d failed (%s); retrying in %.2fs", where, attempt, exc.message, delay)
        finally:
            idle.close()
            await stream.aclose()  # type: ignore[attr-defined]
        await asyncio.sleep(delay)
