"""FairQueue (services/orchestrator/limits/fair_queue.py), driven by events and counters: runs are admitted by
tasks that hand their slots to the test, the test releases them, and a fake clock stands in for time."""

from __future__ import annotations

import asyncio
import collections
import heapq
import math

import grpc
import pytest

from services.orchestrator.limits.fair_queue import FairQueue, QueueFull, Slot, TenantCounts
from tests.support.waiting import eventually


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Runs:
    """Tasks that ask the queue for slots; each slot granted lands in `granted`, in the order granted."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self.granted: asyncio.Queue[Slot] = asyncio.Queue()
        self.tasks: list[asyncio.Task] = []

    async def _run(self, tenant: str, kw: dict) -> None:
        self.granted.put_nowait(await self.queue.admit(tenant, **kw))

    async def wait_for(self, tenant: str, n: int, **kw) -> list[asyncio.Task]:
        """`n` runs of `tenant` queued, in this order (tasks start in the order they are created)."""
        before = self.queue.waiting
        tasks = [asyncio.create_task(self._run(tenant, kw)) for _ in range(n)]
        self.tasks += tasks
        await eventually(lambda: self.queue.waiting == before + n, what=f"{n} runs of {tenant} waiting")
        return tasks

    async def next(self) -> Slot:
        return await asyncio.wait_for(self.granted.get(), 30)

    async def serve(self, n: int, cost_of=lambda slot: 1.0) -> list[str]:
        """Release each next slot as it is granted, `n` times: the tenants in the order they were served."""
        order = []
        for _ in range(n):
            slot = await self.next()
            order.append(slot.tenant)
            slot.release(cost_of(slot))
        return order

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.fixture
async def runs():
    made: list[Runs] = []

    def make(queue: FairQueue) -> Runs:
        made.append(Runs(queue))
        return made[-1]

    yield make
    for r in made:
        await r.close()


def warm_rate(queue: FairQueue, clock: Clock, per_s: float, n: int = 20) -> None:
    """`n` runs admitted and released at `per_s`, so the queue has measured its service rate."""
    for _ in range(n):
        clock.now += 1 / per_s
        coro = queue.admit("warm")
        try:
            coro.send(None)
        except StopIteration as done:
            done.value.release(1.0)
        else:
            raise AssertionError("the warm-up run had to wait")


def refused_at_once(queue: FairQueue, tenant: str, **kw) -> QueueFull:
    """The admit coroutine raises on its first step, never suspending: refused without waiting."""
    coro = queue.admit(tenant, **kw)
    with pytest.raises(QueueFull) as refused:
        coro.send(None)
    return refused.value


@pytest.mark.parametrize("capacity", [1, 3])
async def test_weighted_tenants_are_served_in_proportion_to_their_weights(runs, capacity):
    queue = FairQueue(capacity, math.inf)
    r = runs(queue)
    held = [await queue.admit("hold") for _ in range(capacity)]
    await r.wait_for("heavy", 60, weight=2.0)
    await r.wait_for("light", 60, weight=1.0)
    for slot in held:
        slot.release(1.0)
    served = collections.Counter(await r.serve(60))
    assert abs(served["heavy"] - 40) <= 2 and abs(served["light"] - 20) <= 2, served


async def test_a_tenant_whose_runs_cost_more_is_served_less_often(runs):
    queue = FairQueue(1, math.inf)
    r = runs(queue)
    hold = await queue.admit("hold")
    await r.wait_for("tokens", 40)
    await r.wait_for("cheap", 400)
    hold.release(1.0)
    costs = {"tokens": 10.0, "cheap": 1.0}
    served = collections.Counter(await r.serve(220, lambda slot: costs[slot.tenant]))
    # Equal shares of cost: about ten cheap runs per expensive one, once the expensive one's cost is learnt.
    assert served["cheap"] >= 7 * served["tokens"] and served["tokens"] >= 10, served


async def test_fifty_long_runs_of_one_tenant_cannot_starve_the_short_runs_of_another(runs):
    """Four slots; tenant `long` offers 50 runs that each hold a slot 100 ticks and cost 100, tenant `short`
    500 runs of 1 tick costing 1, queued after `long`'s. A discrete-event simulation on the fake clock: each
    granted slot ends after its run's ticks, the earliest end first."""
    clock = Clock()
    queue = FairQueue(4, math.inf, clock=clock)
    r = runs(queue)
    held = [await queue.admit("hold") for _ in range(4)]
    await r.wait_for("long", 50)
    await r.wait_for("short", 500)
    ticks = {"long": 100, "short": 1}
    ending: list[tuple[float, int, Slot]] = []
    done: collections.Counter = collections.Counter()
    short_running_while_waiting = []
    for slot in held:
        slot.release(1.0)
    for seq in range(4):
        slot = await r.next()
        heapq.heappush(ending, (clock.now + ticks[slot.tenant], seq, slot))
    seq = 4
    while ending:
        end, _, slot = heapq.heappop(ending)
        clock.now = end
        if queue.counts("short").waiting:
            short_running_while_waiting.append(queue.counts("short").running)
        slot.release(float(ticks[slot.tenant]))
        done[slot.tenant] += 1
        if clock.now <= 1000.0 + 100 and slot.tenant == "short":
            done["short_before_the_first_long_run_ends"] += 1
        if queue.running > len(ending):  # the release granted a waiter its slot
            new = await r.next()
            seq += 1
            heapq.heappush(ending, (clock.now + ticks[new.tenant], seq, new))
    assert done["long"] == 50 and done["short"] == 500
    # While it waited, `short` always held its reservation (half its share of four slots)...
    assert min(short_running_while_waiting) >= 1
    # ...so it ran through the first hundred ticks, when `long` had not yet been charged for a long run.
    assert done["short_before_the_first_long_run_ends"] >= 99


async def test_a_higher_priority_is_served_first(runs):
    queue = FairQueue(1, math.inf)
    r = runs(queue)
    hold = await queue.admit("hold")
    await r.wait_for("batch", 5, priority=0)
    await r.wait_for("batch", 2, priority=1)
    await r.wait_for("interactive", 3, priority=5)
    hold.release(1.0)
    assert await r.serve(10) == ["interactive"] * 3 + ["batch"] * 7
    assert queue.counts("batch") == TenantCounts(0, 0)


async def test_over_the_bound_a_run_is_refused_at_once_with_retry_after(runs):
    clock = Clock()
    queue = FairQueue(1, 100.0, clock=clock)
    warm_rate(queue, clock, per_s=10)  # ten runs a second: about ten may wait within one second
    r = runs(queue)
    hold = await queue.admit("flood")
    await r.wait_for("flood", 12)
    queue.max_wait_s = 1.0  # a limits reload
    refused = refused_at_once(queue, "flood")
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.retryable
    assert refused.retry_after_s >= 1.0 and refused.details["retry_after_s"] == refused.retry_after_s
    assert "'flood'" in refused.message and "retry after" in refused.message
    assert queue.counts("flood") == TenantCounts(waiting=12, running=1)
    # Another tenant's run waits: its place is after one of the flood's, not after all of them.
    await r.wait_for("quiet", 1)
    hold.release(1.0)
    assert (await r.next()).tenant == "quiet"
    # A longer bound (a limits reload) lets the flood wait again.
    queue.max_wait_s = 100.0
    await r.wait_for("flood", 1)


async def test_retry_after_grows_with_the_backlog(runs):
    clock = Clock()
    queue = FairQueue(1, 100.0, clock=clock)
    warm_rate(queue, clock, per_s=10)
    r = runs(queue)
    await queue.admit("flood")
    await r.wait_for("flood", 8)
    queue.max_wait_s = 0.5
    short = refused_at_once(queue, "flood").retry_after_s
    queue.max_wait_s = 100.0
    await r.wait_for("flood", 20)
    queue.max_wait_s = 0.5
    assert refused_at_once(queue, "flood").retry_after_s > short


async def test_a_tenant_refused_again_and_again_is_told_to_wait_longer_until_it_is_admitted_again(runs):
    clock = Clock()
    queue = FairQueue(1, 100.0, clock=clock)
    warm_rate(queue, clock, per_s=10)
    r = runs(queue)
    slot = await queue.admit("flood")
    await r.wait_for("flood", 12)
    queue.max_wait_s = 0.5
    delays = [refused_at_once(queue, "flood").retry_after_s for _ in range(60)]
    assert delays == sorted(delays) and delays[-1] > 2 * delays[0]
    queue.max_wait_s = 100.0
    await r.wait_for("flood", 20)
    for _ in range(20):  # twenty runs admitted outweigh the refusal below
        clock.now += 0.1
        slot.release(1.0)
        slot = await r.next()
    queue.max_wait_s = 0.5
    assert refused_at_once(queue, "flood").retry_after_s < delays[-1]
    # At most a minute, the longest the OpenAI SDK honours.
    assert max(refused_at_once(queue, "flood").retry_after_s for _ in range(1000)) == 60.0


async def test_a_waiter_whose_caller_leaves_leaves_the_queue(runs):
    queue = FairQueue(1, math.inf)
    r = runs(queue)
    hold = await queue.admit("a")
    gone = (await r.wait_for("b", 2))[0]
    await r.wait_for("c", 1)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert gone.cancelled()
    assert queue.counts("b") == TenantCounts(waiting=1, running=0) and queue.waiting == 2
    hold.release(1.0)
    assert sorted(await r.serve(2)) == ["b", "c"]
    assert queue.waiting == 0 and queue.running == 0 and queue.snapshot() == {}


async def test_a_slot_granted_as_its_caller_leaves_is_handed_on(runs):
    queue = FairQueue(1, math.inf)
    r = runs(queue)
    hold = await queue.admit("a")
    leaving = (await r.wait_for("b", 1))[0]
    await r.wait_for("c", 1)
    hold.release(1.0)  # grants b's slot; b's task has not yet run when its caller leaves
    leaving.cancel()
    await asyncio.gather(leaving, return_exceptions=True)
    slot = await r.next()
    assert slot.tenant == "c" and queue.counts("b") == TenantCounts(0, 0)
    slot.release(1.0)
    assert queue.running == 0


async def test_capacity_changes_apply_at_once(runs):
    queue = FairQueue(1, math.inf)
    r = runs(queue)
    first = await queue.admit("a")
    await r.wait_for("a", 4)
    queue.capacity = 3  # two more at once
    second, third = await r.next(), await r.next()
    assert queue.running == 3 and queue.waiting == 2
    queue.capacity = 1  # fewer: the running ones go on, nobody else starts until below one
    first.release(1.0)
    second.release(1.0)
    assert queue.running == 1 and queue.waiting == 2
    third.release(1.0)
    fourth = await r.next()
    assert queue.running == 1 and queue.waiting == 1
    fourth.release(1.0)


async def test_release_is_idempotent_and_counts_follow(runs):
    queue = FairQueue(2, math.inf)
    a = await queue.admit("t")
    b = await queue.admit("t")
    assert queue.counts("t") == TenantCounts(waiting=0, running=2) and queue.snapshot() == {"t": TenantCounts(0, 2)}
    a.release(3.0)
    a.release(3.0)
    assert queue.counts("t").running == 1 and a.released and not b.released
    b.release(0.0)
    assert queue.running == 0 and queue.counts("t") == TenantCounts()


@pytest.mark.parametrize("make, field", [
    (lambda: FairQueue(0, 1.0), "capacity"),
    (lambda: FairQueue(2.5, 1.0), "capacity"),
    (lambda: FairQueue(1, 0), "max_wait_s"),
    (lambda: FairQueue(1, 1.0, default_cost=-1), "default_cost"),
])
def test_bad_settings_are_named(make, field):
    with pytest.raises(ValueError, match=field):
        make()


async def test_bad_requests_are_named():
    queue = FairQueue(1, 1.0)
    with pytest.raises(ValueError, match="weight"):
        await queue.admit("t", weight=0)
    with pytest.raises(ValueError, match="tenant"):
        await queue.admit("")
    slot = await queue.admit("t")
    with pytest.raises(ValueError, match="'t'.*cost"):
        slot.release(-1.0)
    with pytest.raises(ValueError, match="capacity"):
        queue.capacity = 0
    slot.release(1.0)
