"""Deadlines and retries around provider calls, the same for every provider.

- Every call has a budget: the caller's gRPC deadline, capped by `timeout_s` (which also applies when the
  caller set none). A stream must also produce something every `stream_idle_s`, so a stalled upstream
  fails with DEADLINE_EXCEEDED instead of holding the call open.
- Only errors marked `retryable` (rate limits, 5xx, connection failures) are tried again, with exponential
  backoff and jitter, honouring the provider's Retry-After, and never past the budget. A stream is retried
  only before its first delta: once text has reached the caller, a retry would repeat it.
- When the budget or the idle limit runs out, the provider's stream is cancelled, which closes its upstream
  request (see providers/base.py).

The retry rule is one tenacity `AsyncRetrying` (`retrying`), built per call from its `CallPolicy` and budget:
the one rule for every outbound HTTP call to a model provider, whatever the provider and whether it streams.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential,
    wait_random_exponential,
)

from services.common.errors import ServiceError
from services.llm_gateway.errors import ProviderTimeout
from services.llm_gateway.models import ChatDelta

log = logging.getLogger(__name__)

T = TypeVar("T")

# A wait must leave at least this much of the budget for the next try to do something.
MIN_TRY_S = 0.05


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


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ServiceError) and exc.retryable


class _Backoff:
    """Exponential backoff with equal jitter (half the step fixed, half random, so clients rate-limited together
    spread out without any retrying at once), capped at `backoff_max_s`; a provider's Retry-After, capped the
    same, is waited at least."""

    def __init__(self, policy: CallPolicy) -> None:
        half, cap = policy.backoff_s / 2, policy.backoff_max_s / 2
        self.step = wait_exponential(multiplier=half, max=cap) + wait_random_exponential(multiplier=half, max=cap)
        self.cap = policy.backoff_max_s

    def __call__(self, state: RetryCallState) -> float:
        delay = self.step(state)
        hint = getattr(state.outcome.exception() if state.outcome else None, "retry_after_s", None)
        return delay if hint is None else max(delay, min(float(hint), self.cap))


def retrying(policy: CallPolicy, budget: Budget, where: str = "",
             on_retry: Callable[[ServiceError], None] = lambda exc: None) -> AsyncRetrying:
    """The retry rule of one call: retryable errors only, at most `max_attempts` tries, the backoff above, and
    no wait that would leave the next try less than MIN_TRY_S of the budget (the error goes to the caller
    then). A failure that is not retried reaches the caller as it was raised."""

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception()  # type: ignore[union-attr]
        on_retry(exc)  # type: ignore[arg-type]
        log.warning("%s: attempt %d failed (%s); retrying in %.2fs", where, state.attempt_number,
                    getattr(exc, "message", exc), state.upcoming_sleep)

    return AsyncRetrying(
        retry=retry_if_exception(_retryable),
        wait=_Backoff(policy),
        stop=stop_any(stop_after_attempt(policy.max_attempts),
                      lambda state: state.upcoming_sleep >= budget.remaining() - MIN_TRY_S),
        before_sleep=before_sleep,
        sleep=asyncio.sleep,
        reraise=True,
    )


def retry_delay(exc: BaseException, attempt: int, policy: CallPolicy, budget: Budget) -> float | None:
    """What the rule decides once try `attempt` failed with `exc`: seconds to wait before the next, or None when
    the error goes to the caller now."""
    rule = retrying(policy, budget)
    state = RetryCallState(rule, fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    state.set_exception((type(exc), exc, exc.__traceback__))
    if not rule.retry(state):
        return None
    state.upcoming_sleep = rule.wait(state)
    return None if rule.stop(state) else state.upcoming_sleep


async def call_with_retries(
    op: Callable[[float], Awaitable[T]],
    *,
    policy: CallPolicy,
    budget: Budget,
    where: str,
    on_retry: Callable[[ServiceError], None] = lambda exc: None,
) -> T:
    """`await op(seconds_left)` within the budget, retrying retryable errors."""

    async def attempt() -> T:
        left = budget.remaining()
        if left <= 0:
            raise ProviderTimeout(f"{where}: deadline of {budget.seconds:.1f}s exceeded")
        try:
            async with asyncio.timeout(left):
                return await op(left)
        except TimeoutError:
            raise ProviderTimeout(f"{where}: no answer within the deadline of {budget.seconds:.1f}s") from None

    return await retrying(policy, budget, where, on_retry)(attempt)


class _IdleLimit:
    """Bounds each wait for a stream's next delta with one timer per stream instead of one per delta (a timer
    per token is a measurable share of the gateway's work on a stream, docs/streaming.md): the timer is armed for the first wait and, when
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


class _Watched:
    """A provider's stream under the budget and the idle limit: `next()` is its next delta, None at its end."""

    def __init__(self, stream: AsyncIterator[ChatDelta], policy: CallPolicy, budget: Budget, where: str) -> None:
        self.stream = stream
        self.policy = policy
        self.budget = budget
        self.where = where
        self.idle = _IdleLimit()

    async def next(self) -> ChatDelta | None:
        left = self.budget.remaining()
        wait = min(self.policy.stream_idle_s, left)
        if wait <= 0:
            raise ProviderTimeout(f"{self.where}: deadline of {self.budget.seconds:.1f}s exceeded")
        idle = self.idle
        idle.begin(wait)
        try:
            return await anext(self.stream)
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not idle.fired or idle.task is None or idle.task.uncancel() > 0:
                raise  # a cancel of the call itself
            if wait < left:
                raise ProviderTimeout(f"{self.where}: the stream stalled (nothing for {wait:.1f}s)") from None
            raise ProviderTimeout(f"{self.where}: deadline of {self.budget.seconds:.1f}s exceeded") from None
        finally:
            idle.end()

    async def aclose(self) -> None:
        self.idle.close()
        await self.stream.aclose()  # type: ignore[attr-defined]


async def stream_with_retries(
    open_stream: Callable[[float], AsyncIterator[ChatDelta]],
    *,
    policy: CallPolicy,
    budget: Budget,
    where: str,
    on_retry: Callable[[ServiceError], None] = lambda exc: None,
) -> AsyncIterator[ChatDelta]:
    """Re-yield `open_stream(seconds_left)` under the budget and the idle limit. The retry rule covers a try up to
    its first delta (or its end); after that, an error goes to the caller."""

    async def until_first_delta() -> tuple[_Watched, ChatDelta | None]:
        watched = _Watched(open_stream(max(budget.remaining(), 0.001)), policy, budget, where)
        try:
            return watched, await watched.next()
        except BaseException:
            await watched.aclose()
            raise

    watched, delta = await retrying(policy, budget, where, on_retry)(until_first_delta)
    try:
        while delta is not None:
            yield delta
            delta = await watched.next()
    finally:
        await watched.aclose()
