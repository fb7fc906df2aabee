"""Fair sharing of one orchestrator replica's run capacity between tenants, when the machine is saturated.

A replica drives at most `capacity` runs at once. Past that, runs wait here and are admitted by Start-time
Fair Queueing (SFQ: Goyal, Vin and Cheng, 1996) over per-tenant virtual time, the multi-server form that
dispatches in start-tag order (SFQ(D): Jin, Chase and Kaur, 2004):

- each tenant has a virtual time, the finish tag of its last admitted run; the queue's virtual time V is the
  start tag of the last run it admitted. A tenant's next run starts at `max(V, its virtual time)`, and the
  waiting tenant with the smallest start tag is served next (ties: the earliest arrival). A tenant that was
  idle starts at V, so it neither banks credit while away nor pays for others' history;
- a run advances its tenant's virtual time by `cost / weight`. What a run costs (LLM tokens plus a base cost
  per run, say) is known only when it ends, so, as 2DFQ does for requests of unknown cost (Mace et al.,
  2016), the tenant is charged an estimate when the run is admitted (the moving average of its runs' costs)
  and the difference when it is released. A tenant whose runs cost a hundred times more is admitted a
  hundred times less often;
- cost is known late, and a run that holds a slot for long holds it whatever it is charged, so each waiting
  tenant is also reserved half its weighted share of the slots (`capacity * weight / the waiting tenants'
  weights / 2`; mClock's reservations, Gulati et al. 2010, counted in slots): a waiting tenant that holds
  fewer is served first. Fifty long runs of one tenant, charged little until their first ones end, cannot
  take every slot from five thousand short runs of another; past the reservations, cost decides.

Priority classes come first: a waiting run of a higher `priority` is always admitted before any run of a
lower one (within a class, tenants share as above; a tenant has one virtual time across classes).

The wait is bounded. A run that would wait has its wait estimated, its position (the runs admitted before
it: every run of a higher class, its tenant's own waiting runs, and the others' by their weight against its
tenant's) over the service rate (slots released per second over the last few seconds). Over `max_wait_s` it
is refused at once, before waiting, with `QueueFull` (RESOURCE_EXHAUSTED) carrying `retry_after_s`. So a
flooding tenant is refused while another tenant's run, whose position is short, still waits its turn.

A refusal costs the machine almost what a short run does (a request crosses the gateway and reaches the
orchestrator either way), so `retry_after_s` spreads a flood's retries: it is at least `max_wait_s` and the time
until such a run would fit at the current rate, and a tenant that keeps being refused is told to wait longer.
Each of its refusals multiplies its retry delay by RETRY_GROWTH, each of its admitted runs divides it by
RETRY_GROWTH ** REFUSALS_PER_ADMISSION (up to RETRY_AFTER_MAX_S: the OpenAI SDK ignores a longer one), so
clients that honour it settle at about REFUSALS_PER_ADMISSION refusals per admitted run, however many they
are. Runs already admitted are not touched. A waiter whose caller goes away (its task cancelled) leaves the
queue; if its slot was granted in that instant, the slot is handed on and its charge refunded.

API (one instance per replica, used from one event loop; no Redis: the limits shared across replicas live
elsewhere in services/orchestrator/limits/):

    queue = FairQueue(capacity=16, max_wait_s=2.0)
    slot = await queue.admit(tenant, weight=1.0, priority=0)   # may raise QueueFull
    try:
        ...drive the run...
    finally:
        slot.release(cost)            # idempotent; cost >= 0, in the unit of `default_cost`
    queue.capacity = 32               # a limits reload: applies at once (waiters admitted if room)
    queue.max_wait_s = 5.0
    queue.counts(tenant)              # TenantCounts(waiting, running), for metrics
    queue.snapshot()                  # {tenant: TenantCounts} of every tenant waiting or running
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from dataclasses import dataclass
from typing import Callable

from services.common.errors import ResourceExhausted

RATE_WINDOW_S = 5.0  # the service rate is measured over the releases of the last few seconds...
RATE_SAMPLES = 4096  # ...at most this many (a busier replica measures over a shorter window)
COST_SMOOTHING = 0.25  # weight of a run's cost in its tenant's moving-average estimate
RETRY_GROWTH = 1.02  # a tenant's retry delay, times this per refusal...
REFUSALS_PER_ADMISSION = 0.1  # ...and divided by RETRY_GROWTH ** this per admitted run
RETRY_AFTER_MAX_S = 60.0
RESERVED_SHARE = 0.5  # a waiting tenant holding less than this part of its weighted share of the slots goes first

_RETRY_SHRINK = RETRY_GROWTH ** REFUSALS_PER_ADMISSION


class QueueFull(ResourceExhausted):
    """A run refused because its estimated wait for a slot is over the bound; retry after `retry_after_s`."""

    def __init__(self, tenant: str, *, estimated_wait_s: float, max_wait_s: float, retry_after_s: float,
                 capacity: int) -> None:
        super().__init__(
            f"tenant {tenant!r}: the orchestrator is running its capacity of {capacity} runs and this run's"
            f" estimated wait of {estimated_wait_s:.3f} s is over the bound of {max_wait_s:g} s;"
            f" retry after {retry_after_s:.3f} s",
            details={"tenant": tenant, "retry_after_s": retry_after_s, "estimated_wait_s": estimated_wait_s})
        self.tenant = tenant
        self.retry_after_s = retry_after_s
        self.estimated_wait_s = estimated_wait_s


@dataclass(frozen=True)
class TenantCounts:
    waiting: int = 0
    running: int = 0


class _Tenant:
    __slots__ = ("name", "vtime", "estimate", "running", "waiting", "retry_after")

    def __init__(self, name: str, estimate: float) -> None:
        self.name = name
        self.vtime = 0.0  # finish tag of its last admitted run
        self.estimate = estimate  # what its next run is charged when admitted
        self.running = 0
        self.waiting = 0
        self.retry_after = 0.0  # the delay its refusals tell it (0: never refused since it was last forgotten)


class _Waiter:
    __slots__ = ("tenant", "weight", "priority", "seq", "future", "queued")

    def __init__(self, tenant: _Tenant, weight: float, priority: int, seq: int, future: asyncio.Future) -> None:
        self.tenant = tenant
        self.weight = weight
        self.priority = priority
        self.seq = seq
        self.future = future
        self.queued = True


class Slot:
    """One admitted run's place in the queue's capacity; `release(cost)` gives it back (once)."""

    __slots__ = ("_queue", "_tenant", "_weight", "_charged", "_released", "priority")

    def __init__(self, queue: FairQueue, tenant: _Tenant, weight: float, charged: float, priority: int) -> None:
        self._queue = queue
        self._tenant = tenant
        self._weight = weight
        self._charged = charged
        self._released = False
        self.priority = priority

    @property
    def tenant(self) -> str:
        return self._tenant.name

    @property
    def released(self) -> bool:
        return self._released

    def release(self, cost: float) -> None:
        """End the run: charge its tenant what it cost (in the unit of `default_cost`) and admit the next
        waiter. A second call does nothing."""
        if self._released:
            return
        if not (cost >= 0 and math.isfinite(cost)):
            raise ValueError(f"fair queue: tenant {self.tenant!r}: a run's cost must be a finite number >= 0,"
                             f" not {cost!r}")
        self._released = True
        self._queue._release(self._tenant, self._weight, self._charged, cost)


class FairQueue:
    """Admits runs up to `capacity` at once and queues the rest fairly between tenants (module docstring).

    `default_cost`: what a run of a tenant with no history is charged at admission (the unit every cost is
    in); `clock`: seconds, monotonic (a test passes its own).
    """

    def __init__(self, capacity: int, max_wait_s: float, *, default_cost: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (default_cost > 0 and math.isfinite(default_cost)):
            raise ValueError(f"fair queue: default_cost must be a finite number > 0, not {default_cost!r}")
        self._default_cost = default_cost
        self._clock = clock
        self._vnow = 0.0  # V: start tag of the last admitted run
        self._tenants: dict[str, _Tenant] = {}
        self._sweep_at = 64  # forget idle tenants when there are this many (doubles with what remains)
        # priority -> tenant -> its waiters in arrival order; only non-empty entries
        self._classes: dict[int, dict[str, collections.deque[_Waiter]]] = {}
        self._running = 0
        self._waiting = 0
        self._seq = 0
        self._releases: collections.deque[float] = collections.deque(maxlen=RATE_SAMPLES)
        self.capacity = capacity
        self.max_wait_s = max_wait_s

    # ---- settings, changeable at runtime ----

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"fair queue: capacity must be an integer >= 1, not {value!r}")
        self._capacity = value
        self._dispatch()  # more room: admit waiters now; less: running runs end as they would

    @property
    def max_wait_s(self) -> float:
        return self._max_wait_s

    @max_wait_s.setter
    def max_wait_s(self, value: float) -> None:
        if not (isinstance(value, (int, float)) and value > 0):  # inf: never refuse
            raise ValueError(f"fair queue: max_wait_s must be a number of seconds > 0, not {value!r}")
        self._max_wait_s = float(value)

    # ---- counters, for metrics ----

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    def counts(self, tenant: str) -> TenantCounts:
        state = self._tenants.get(tenant)
        return TenantCounts(state.waiting, state.running) if state else TenantCounts()

    def snapshot(self) -> dict[str, TenantCounts]:
        return {name: TenantCounts(s.waiting, s.running) for name, s in self._tenants.items()
                if s.waiting or s.running}

    # ---- admission ----

    async def admit(self, tenant: str, *, weight: float = 1.0, priority: int = 0) -> Slot:
        """A slot for one run of `tenant`: at once if the replica has room and nobody waits, else after its
        turn. Raises QueueFull, without waiting, if its estimated wait is over `max_wait_s`."""
        if not tenant:
            raise ValueError("fair queue: a run needs a tenant")
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"fair queue: tenant {tenant!r}: weight must be a finite number > 0, not {weight!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"fair queue: tenant {tenant!r}: priority must be an integer, not {priority!r}")
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(tenant, self._default_cost)
        if self._running < self._capacity and not self._waiting:
            return self._start(state, weight, priority)
        wait = self._estimated_wait(state, weight, priority)
        if wait > self._max_wait_s:
            retry_after = self._refused(state, wait)
            self._forget_if_idle(state)
            raise QueueFull(tenant, estimated_wait_s=wait, max_wait_s=self._max_wait_s, retry_after_s=retry_after,
                            capacity=self._capacity)
        self._seq += 1
        waiter = _Waiter(state, weight, priority, self._seq, asyncio.get_running_loop().create_future())
        self._classes.setdefault(priority, {}).setdefault(tenant, collections.deque()).append(waiter)
        state.waiting += 1
        self._waiting += 1
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.queued:
                self._unqueue(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                waiter.future.result().release(0.0)  # granted as its caller left: refund, hand the slot on
            self._forget_if_idle(state)
            raise

    def _start(self, state: _Tenant, weight: float, priority: int) -> Slot:
        start = max(self._vnow, state.vtime)
        self._vnow = start
        charged = state.estimate
        if state.retry_after:  # admitted: what its refusals say shrinks (module docstring)
            state.retry_after /= _RETRY_SHRINK
        state.vtime = start + charged / weight
        state.running += 1
        self._running += 1
        return Slot(self, state, weight, charged, priority)

    def _release(self, state: _Tenant, weight: float, charged: float, cost: float) -> None:
        state.vtime += (cost - charged) / weight
        state.estimate += COST_SMOOTHING * (cost - state.estimate)
        state.estimate = max(state.estimate, 1e-9 * self._default_cost)  # a tenant of free runs still moves V
        state.running -= 1
        self._running -= 1
        self._releases.append(self._clock())
        self._dispatch()
        self._forget_if_idle(state)

    def _dispatch(self) -> None:
        """Admit waiters while there is room, each time the one SFQ serves next."""
        while self._running < self._capacity and self._waiting:
            waiter = self._next_waiter()
            self._unqueue(waiter)
            if waiter.future.cancelled():  # its caller left; its own handler finds it unqueued
                continue
            waiter.future.set_result(self._start(waiter.tenant, waiter.weight, waiter.priority))

    def _next_waiter(self) -> _Waiter:
        heads = [queue[0] for queue in self._classes[max(self._classes)].values()]
        if len(heads) > 1:  # the reservations first: tenants holding less than theirs
            slots_per_weight = RESERVED_SHARE * self._capacity / sum(w.weight for w in heads)
            reserved = [w for w in heads if w.tenant.running < slots_per_weight * w.weight]
            heads = reserved or heads
        return min(heads, key=lambda w: (max(self._vnow, w.tenant.vtime), w.seq))

    def _unqueue(self, waiter: _Waiter) -> None:
        tenants = self._classes[waiter.priority]
        queue = tenants[waiter.tenant.name]
        queue.remove(waiter)  # the head when dispatched; anywhere when its caller left
        if not queue:
            del tenants[waiter.tenant.name]
            if not tenants:
                del self._classes[waiter.priority]
        waiter.queued = False
        waiter.tenant.waiting -= 1
        self._waiting -= 1

    # ---- the bounded wait ----

    def _estimated_wait(self, state: _Tenant, weight: float, priority: int) -> float:
        """Seconds until a run arriving now would be admitted: its position over the service rate."""
        ahead = sum(sum(len(q) for q in tenants.values()) for p, tenants in self._classes.items() if p > priority)
        same = self._classes.get(priority, {})
        own = len(same.get(state.name, ()))
        others = sum(len(q) for name, q in same.items() if name != state.name)
        others_weight = sum(q[0].weight for name, q in same.items() if name != state.name)
        # For each of its own runs the others are served others_weight / weight runs (as many as they have).
        position = ahead + own + 1 + min(others, (own + 1) * others_weight / weight)
        return position / self._rate()

    def _refused(self, state: _Tenant, wait: float) -> float:
        """A refusal's retry_after_s: not before its place would be within the bound at the current rate, nor
        before the runs waiting now are admitted (the same flood replaces them as fast), and longer the more the
        tenant is refused against what it is admitted."""
        state.retry_after = min(RETRY_AFTER_MAX_S, max(state.retry_after, self._max_wait_s) * RETRY_GROWTH)
        return min(RETRY_AFTER_MAX_S, max(wait - self._max_wait_s, state.retry_after))

    def _rate(self) -> float:
        """Slots released per second over the last RATE_WINDOW_S; before any is measured, `capacity` every
        `max_wait_s` (at most `capacity` runs wait)."""
        now = self._clock()
        while self._releases and self._releases[0] < now - RATE_WINDOW_S:
            self._releases.popleft()
        if len(self._releases) < 2 or now <= self._releases[0]:
            return self._capacity / self._max_wait_s if math.isfinite(self._max_wait_s) else math.inf
        return (len(self._releases) - 1) / (now - self._releases[0])  # intervals since the oldest release

    # ---- memory ----

    def _forget_if_idle(self, state: _Tenant) -> None:
        """An idle tenant that owes nothing (its virtual time is not ahead of V) is the same as a new one."""
        if not state.running and not state.waiting and state.vtime <= self._vnow:
            self._tenants.pop(state.name, None)
        if len(self._tenants) >= self._sweep_at:  # the idle ones that owed something, once V has passed them
            for name in [n for n, s in self._tenants.items() if not s.running and not s.waiting
                         and s.vtime <= self._vnow]:
                del self._tenants[name]
            self._sweep_at = max(64, 2 * len(self._tenants))
