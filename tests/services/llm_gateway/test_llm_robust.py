"""Retry and deadline rules (robust.py), on plain coroutines: no server needed."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common.errors import InvalidArgument
from services.llm_gateway.errors import ProviderRateLimited, ProviderTimeout, ProviderUnavailable
from services.llm_gateway.robust import Budget, CallPolicy, call_with_retries, retry_delay, stream_with_retries
from services.llm_gateway.models import ChatDelta
from tests.support.timers import timers_armed

POLICY = CallPolicy(timeout_s=5, stream_idle_s=5, max_attempts=3, backoff_s=0.01, backoff_max_s=0.05)


async def test_retry_delay_rules():
    budget = Budget(10)
    assert retry_delay(InvalidArgument("bad"), 1, POLICY, budget) is None  # not retryable
    assert retry_delay(ProviderUnavailable("down"), 3, POLICY, budget) is None  # attempts used up
    first = retry_delay(ProviderUnavailable("down"), 1, POLICY, budget)
    assert first is not None and 0.005 <= first <= 0.01
    # Retry-After is honoured, capped by backoff_max_s.
    assert retry_delay(ProviderRateLimited("slow down", retry_after_s=0.04), 1, POLICY, budget) == pytest.approx(0.04)
    assert retry_delay(ProviderRateLimited("slow down", retry_after_s=60), 1, POLICY, budget) == pytest.approx(0.05)
    # No waiting past the budget.
    assert retry_delay(ProviderRateLimited("slow", retry_after_s=0.05), 1, POLICY, Budget(0.02)) is None


async def test_call_with_retries_retries_then_succeeds_and_times_out():
    attempts = []

    async def flaky(left: float) -> str:
        attempts.append(left)
        if len(attempts) < 3:
            raise ProviderUnavailable("503")
        return "ok"

    assert await call_with_retries(flaky, policy=POLICY, budget=Budget(5), where="P m") == "ok"
    assert len(attempts) == 3 and attempts[0] > attempts[2]  # each try gets the time that is left

    async def hang(left: float) -> str:
        await asyncio.sleep(10)
        return "never"

    with pytest.raises(ProviderTimeout) as err:
        await call_with_retries(hang, policy=POLICY, budget=Budget(0.1), where="P m")
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and "P m" in err.value.message


async def test_streams_are_retried_only_before_their_first_delta():
    opened = []

    def opener(fail_after: int):
        def open_stream(left: float):
            async def gen():
                opened.append(left)
                for i in range(fail_after):
                    yield ChatDelta(content=str(i))
                raise ProviderUnavailable("connection reset")
            return gen()
        return open_stream

    with pytest.raises(ProviderUnavailable):
        [d async for d in stream_with_retries(opener(0), policy=POLICY, budget=Budget(5), where="P m")]
    assert len(opened) == 3  # nothing reached the caller: every attempt was used
    opened.clear()
    got = []
    with pytest.raises(ProviderUnavailable):
        async for d in stream_with_retries(opener(1), policy=POLICY, budget=Budget(5), where="P m"):
            got.append(d.content)
    assert got == ["0"] and len(opened) == 1  # text was out: a retry would repeat it


async def test_a_stalled_stream_is_closed_when_the_idle_limit_passes():
    closed = asyncio.Event()

    async def stalled(left: float):
        try:
            yield ChatDelta(content="a")
            await asyncio.sleep(30)
            yield ChatDelta(content="never")
        finally:
            closed.set()

    policy = CallPolicy(timeout_s=5, stream_idle_s=0.1, max_attempts=1)
    got = []
    with pytest.raises(ProviderTimeout) as err:
        async for d in stream_with_retries(stalled, policy=policy, budget=Budget(5), where="P m"):
            got.append(d.content)
    assert got == ["a"] and "stalled" in err.value.message
    assert closed.is_set()  # the provider's stream (and so its connection) was closed


def _every(pause_s: float, n: int, then_stall: bool = False):
    def open_stream(left: float):
        async def gen():
            for i in range(n):
                await asyncio.sleep(pause_s)
                yield ChatDelta(content=str(i))
            if then_stall:
                await asyncio.sleep(30)
        return gen()
    return open_stream


async def test_a_stream_that_keeps_coming_is_not_cut_however_long_it_lasts():
    """Twelve deltas 40 ms apart under a 100 ms idle limit: the limit bounds each wait, not the stream."""
    policy = CallPolicy(timeout_s=5, stream_idle_s=0.1, max_attempts=1)
    got = [d.content async for d in stream_with_retries(_every(0.04, 12), policy=policy, budget=Budget(5), where="P m")]
    assert got == [str(i) for i in range(12)]


async def test_a_stream_that_stalls_after_many_deltas_is_closed():
    policy = CallPolicy(timeout_s=5, stream_idle_s=0.1, max_attempts=1)
    got = []
    with pytest.raises(ProviderTimeout, match="stalled"):
        async for d in stream_with_retries(_every(0.02, 10, then_stall=True), policy=policy, budget=Budget(5), where="P m"):
            got.append(d.content)
    assert got == [str(i) for i in range(10)]


async def test_a_slow_reader_is_not_a_stalled_stream():
    """The caller takes longer than the idle limit over each delta; the provider answers at once."""
    policy = CallPolicy(timeout_s=5, stream_idle_s=0.1, max_attempts=1)
    got = []
    async for d in stream_with_retries(_every(0, 4), policy=policy, budget=Budget(5), where="P m"):
        got.append(d.content)
        await asyncio.sleep(0.25)
    assert got == ["0", "1", "2", "3"]


async def test_a_cancelled_call_is_cancelled_not_timed_out():
    policy = CallPolicy(timeout_s=5, stream_idle_s=0.2, max_attempts=1)

    async def read() -> None:
        async for _ in stream_with_retries(_every(0.01, 1, then_stall=True), policy=policy, budget=Budget(5), where="P m"):
            pass

    task = asyncio.create_task(read())
    await asyncio.sleep(0.1)  # waiting for the delta that never comes
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stream_arms_a_timer_per_stream_not_per_delta():
    with timers_armed() as armed:
        got = [d async for d in stream_with_retries(_every(0, 200), policy=POLICY, budget=Budget(5), where="P m")]
    assert len(got) == 200 and armed.count < 5


async def test_only_retryable_errors_are_tried_again():
    tries = []

    async def refused(left: float) -> str:
        tries.append(left)
        raise InvalidArgument("400")

    with pytest.raises(InvalidArgument):
        await call_with_retries(refused, policy=POLICY, budget=Budget(5), where="P m")
    assert len(tries) == 1


async def test_retry_after_is_waited_and_a_wait_past_the_budget_is_not():
    loop = asyncio.get_running_loop()
    tries: list[float] = []

    async def limited(left: float) -> str:
        tries.append(loop.time())
        if len(tries) == 1:
            raise ProviderRateLimited("429", retry_after_s=0.2)
        return "ok"

    policy = CallPolicy(timeout_s=5, stream_idle_s=5, max_attempts=3, backoff_s=0.01, backoff_max_s=1)
    assert await call_with_retries(limited, policy=policy, budget=Budget(5), where="P m") == "ok"
    assert tries[1] - tries[0] >= 0.2 - 0.01  # (the loop's clock may tick in ms)
    tries.clear()

    async def always_limited(left: float) -> str:
        tries.append(loop.time())
        raise ProviderRateLimited("429", retry_after_s=0.5)

    with pytest.raises(ProviderRateLimited):  # the hint would outlast the budget: the caller hears it at once
        await call_with_retries(always_limited, policy=policy, budget=Budget(0.3), where="P m")
    assert len(tries) == 1
