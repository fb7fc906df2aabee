"""Limits resolution and the execution pool, without gRPC."""

from __future__ import annotations

import asyncio

import pytest

from services.common.errors import InvalidArgument, ResourceExhausted
from services.sandbox.isolation import RUNTIME_TASKS, rlimits
from services.sandbox.limits import MAXIMA, Limits, resolve
from services.sandbox.models import Language
from services.sandbox.pool import ExecutionPool
from tests.support.waiting import eventually


def test_zero_means_default_and_values_within_bounds_are_kept():
    got = resolve({"wall_time_ms": 0, "memory_bytes": 100 << 20}, Limits(), MAXIMA)
    assert got.wall_time_ms == Limits().wall_time_ms and got.memory_bytes == 100 << 20


@pytest.mark.parametrize(
    "field,value,words",
    [("cpu_time_ms", -5, "negative"), ("memory_bytes", 1 << 20, "below the minimum"), ("max_processes", 10**6, "exceeds")],
)
def test_out_of_range_limits_name_the_field(field: str, value: int, words: str):
    with pytest.raises(InvalidArgument) as err:
        resolve({field: value}, Limits(), MAXIMA)
    assert f"limits.{field}={value}" in err.value.message and words in err.value.message


def test_rlimits_follow_the_limits():
    lim = Limits(cpu_time_ms=1500, memory_bytes=64 << 20, max_processes=3, max_file_bytes=1 << 20)
    r = rlimits(lim, Language.PYTHON)
    assert r["RLIMIT_CPU"] == (2, 3)  # rounded up to whole seconds; SIGKILL one second after SIGXCPU
    assert r["RLIMIT_DATA"] == (64 << 20, 64 << 20) and r["RLIMIT_FSIZE"] == (1 << 20, 1 << 20)
    assert r["RLIMIT_NPROC"][0] == 3 + RUNTIME_TASKS[Language.PYTHON] and r["RLIMIT_CORE"] == (0, 0)


async def test_pool_refuses_at_once_when_workers_and_queue_are_full():
    pool = ExecutionPool(workers=1, queue=1)
    release = asyncio.Event()
    slots: list[int] = []

    async def hold() -> None:
        async with pool.slot() as i:
            slots.append(i)
            await release.wait()

    first = asyncio.create_task(hold())
    second = asyncio.create_task(hold())
    await eventually(lambda: pool.busy == 1 and pool.waiting == 1, what="one holder in, one waiting")
    with pytest.raises(ResourceExhausted):
        async with pool.slot():
            pass
    release.set()
    await asyncio.gather(first, second)
    assert slots == [0, 0] and pool.busy == 0 and pool.waiting == 0


async def test_cancelled_waiter_takes_no_slot():
    pool = ExecutionPool(workers=1, queue=2)
    async with pool.slot():
        waiter = asyncio.create_task(pool.slot().__aenter__())
        await eventually(lambda: pool.waiting == 1, what="the waiter queued")
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert pool.waiting == 0
    async with pool.slot() as i:  # the slot came back exactly once
        assert i == 0 and pool.busy == 1
