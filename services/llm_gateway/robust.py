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
    delay = base / 2 + random.uniform(0, base / 2)  # jitter: clients rate-limited together spread out
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
        try:
            while True:
                left = budget.remaining()
                wait = min(policy.stream_idle_s, left)
                if wait <= 0:
                    raise ProviderTimeout(f"{where}: deadline of {budget.seconds:.1f}s exceeded")
                try:
                    async with asyncio.timeout(wait):
                        delta = await anext(stream)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    if wait < left:
                        raise ProviderTimeout(f"{where}: the stream stalled (nothing for {wait:.1f}s)") from None
                    raise ProviderTimeout(f"{where}: deadline of {budget.seconds:.1f}s exceeded") from None
                started = True
                yield delta
        except ServiceError as exc:
            delay = None if started else retry_delay(exc, attempt, policy, budget)
            if delay is None:
                raise
            on_retry(exc)
            log.warning("%s: attempt %d failed (%s); retrying in %.2fs", where, attempt, exc.message, delay)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        await asyncio.sleep(delay)
