"""One replica's door for the limits per tenant: `admit_run` before a run writes anything, `hold_stream` for a
caller's stream, `charge_tokens` for every model call, and the background pass that reconciles this replica's
leases with Redis. docs/limits.md says what each limit means and how it is enforced across replicas.

A run is admitted in this order, each step only when the limit is set, and a refusal undoes the steps before
it (locally: nothing is written for the run): the tenant's LLM tokens this minute (slots.py, windows.py), its
runs at once, its runs started per second, then a slot of this replica's capacity from the fair queue
(fair_queue.py), which may wait up to its bound. The ticket it gets holds what it took until the run ends.

What it admitted, refused and charged is counted per tenant (metrics.py, and tally.py for GetTenantAdmission);
a background pass writes the tally to Redis about once a second (store/admission.py), so `admission(tenant)`
sums every replica's figures without a round trip on any run's path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from services.common.logs import Outage
from services.orchestrator import metrics
from services.orchestrator.limits.fair_queue import FairQueue, QueueFull, Slot
from services.orchestrator.limits.policy import (
    CONCURRENT_RUNS,
    HELD_STREAMS,
    RUNS_PER_SECOND,
    TOKENS_PER_MINUTE,
    Limits,
    LimitsTable,
    Scope,
    Share,
)
from services.orchestrator.limits.refusal import LimitExceeded, Overloaded
from services.orchestrator.limits.slots import SlotLeases
from services.orchestrator.limits.source import LimitsSource
from services.orchestrator.limits.tally import TenantTally
from services.orchestrator.store.admission import AdmissionFigureStore
from services.orchestrator.limits.windows import StartLeases, TokenBudgets
from services.orchestrator.store.limits import LimitStore

log = logging.getLogger(__name__)

# What a run costs in the fair queue: one unit, plus one per this many LLM tokens it used.
TOKENS_PER_COST_UNIT = 1000
# A refusal at a concurrency limit: retry once the replicas have reconciled their leases (or a run ended).
CONCURRENCY_RETRY_S = 1.0
# Each replica writes its admission figures this often, live for FIGURES_TTL_S (a dead replica's drop out of the
# sums within that), and writes a tenant's again unchanged every third of it.
FIGURES_EVERY_S = 1.0
FIGURES_TTL_S = 5.0


@dataclass(frozen=True)
class TenantAdmission:
    """A tenant's figures summed over the live replicas (GetTenantAdmission), and its limits in force."""

    admitted: int
    refused_by_limit: dict[str, int]
    running: int
    waiting: int
    tokens: int
    tokens_last_minute: int
    replicas: int  # how many replicas' figures are in the sums
    limits: Limits
    share: Share


class RunTicket:
    """What an admitted run holds until it ends: slots of its scopes, a fair-queue slot; `release()` once."""

    __slots__ = ("gate", "tenant", "run_id", "scopes", "slots", "queue_slot", "tokens", "released")

    def __init__(self, gate: TenantGate, tenant: str, run_id: str, scopes: list[Scope],
                 slots: list[tuple[Scope, int]], queue_slot: Slot | None) -> None:
        self.gate = gate
        self.tenant = tenant
        self.run_id = run_id
        self.scopes = scopes
        self.slots = slots
        self.queue_slot = queue_slot
        self.tokens = 0  # LLM tokens its model calls used (charge_tokens)
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.gate._release(self)


class StreamTicket:
    """A held stream's slots; `release()` once."""

    __slots__ = ("gate", "tenant", "slots", "released")

    def __init__(self, gate: TenantGate, tenant: str, slots: list[tuple[Scope, int]]) -> None:
        self.gate = gate
        self.tenant = tenant
        self.slots = slots
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.gate._release_stream(self)


class TenantGate:
    def __init__(self, source: LimitsSource, store: LimitStore, figures: AdmissionFigureStore | None = None) -> None:
        self.source = source
        self.store = store
        self.figures = figures  # None: `admission()` answers with this replica's figures alone
        self.tally = TenantTally()
        self._written: dict[str, tuple[dict[str, int], float]] = {}  # tenant -> (figures, when) last written
        self.reconcile_s = store.lease_ttl_s / 3  # leases are renewed three times per TTL
        self.runs = SlotLeases(store, "runs", CONCURRENT_RUNS)
        self.streams = SlotLeases(store, "streams", HELD_STREAMS)
        self.starts = StartLeases(store)
        self.tokens = TokenBudgets(store)
        self.queue: FairQueue | None = None
        self._tickets: dict[str, RunTicket] = {}  # by run id, while the run runs here
        self._running: Counter[str] = Counter()
        self._streams_held: Counter[str] = Counter()
        self._loop: asyncio.Task | None = None
        self._figures_loop: asyncio.Task | None = None
        self.apply(source.table)
        source.on_change = self.apply
        metrics.watch_tenants(self)

    # ---- lifecycle -------------------------------------------------------------------------------------
    def apply(self, table: LimitsTable) -> None:
        """The limits file changed: the fair queue takes its new capacity at once (the limits are read from the
        table at each admission)."""
        capacity = table.capacity
        if capacity is None:
            self.queue = None  # runs holding a slot of the old queue release it there
        elif self.queue is None:
            self.queue = FairQueue(capacity.runs, capacity.max_wait_s)
        else:
            self.queue.capacity, self.queue.max_wait_s = capacity.runs, capacity.max_wait_s

    def start(self) -> None:
        self.source.start()
        self._loop = asyncio.create_task(self._reconcile_loop(), name="limits-reconcile")
        if self.figures is not None:
            self._figures_loop = asyncio.create_task(self._write_figures_loop(), name="limits-figures")

    async def stop(self) -> None:
        await self.source.stop()
        for task in (self._loop, self._figures_loop):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _reconcile_loop(self) -> None:
        outage = Outage(log, "limits: could not reconcile this replica's leases")
        while True:
            await asyncio.sleep(self.reconcile_s)
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                outage.failed()
            else:
                outage.ok()

    async def reconcile(self) -> None:
        """Renew this replica's leases and give back what it does not use (a dead replica's expire)."""
        await self.runs.reconcile()
        await self.streams.reconcile()
        self.starts.forget_idle()
        self.tokens.forget_idle()

    # ---- runs ------------------------------------------------------------------------------------------
    async def admit_run(self, tenant: str, run_id: str, *, api_key_id: str = "", agent_id: str = "") -> RunTicket:
        """Admit a new run of the tenant or raise LimitExceeded / Overloaded, having taken nothing."""
        table = self.source.table
        scopes = table.scopes(tenant, api_key_id, agent_id) if table.any_limits else []
        slots: list[tuple[Scope, int]] = []
        started: list[Scope] = []
        try:
            for scope in scopes:
                wait = await self.tokens.check(scope)
                if wait is not None:
                    self._refuse(scope, TOKENS_PER_MINUTE, scope.limits.tokens_per_minute, wait, window_s=60)
            limited = self.runs.limited(scopes)
            if limited:
                at = await self.runs.acquire(limited)
                if at is not None:
                    self._refuse(at, CONCURRENT_RUNS, at.limits.concurrent_runs, CONCURRENCY_RETRY_S)
                slots = limited
            for scope in scopes:
                wait = await self.starts.take(scope)
                if wait is not None:
                    runs, seconds = scope.limits.run_window
                    self._refuse(scope, RUNS_PER_SECOND, scope.limits.runs_per_second, wait, window_s=seconds,
                                 window_quota=runs, detail=f" (at most {runs} started in any {seconds} s)")
                started.append(scope)
            queue_slot = await self._queue_slot(tenant, table)
        except BaseException:
            self.runs.release(slots)
            for scope in started:
                self.starts.give_back(scope)
            raise
        metrics.tenant_admitted(tenant)
        self.tally.admit(tenant)
        return self._ticket(tenant, run_id, scopes, slots, queue_slot)

    async def _queue_slot(self, tenant: str, table: LimitsTable) -> Slot | None:
        queue = self.queue
        if queue is None:
            return None
        share = table.share(tenant)
        try:
            return await queue.admit(tenant, weight=share.weight, priority=share.priority)
        except QueueFull as full:
            metrics.tenant_refused(tenant, "capacity")
            self.tally.refuse(tenant, "capacity")
            raise Overloaded(tenant, full.message, full.retry_after_s, queue.capacity) from None

    def admit_exempt(self, tenant: str, run_id: str, *, api_key_id: str = "", agent_id: str = "",
                     taken_over: bool = False) -> RunTicket:
        """A run that is never refused: one taken over from a dead replica (admitted there already: it takes its
        slots here whatever is leased), or a child run of an admitted run (counted in its caller's). Its LLM
        tokens are charged all the same."""
        table = self.source.table
        scopes = table.scopes(tenant, api_key_id, agent_id) if table.any_limits else []
        slots = self.runs.limited(scopes) if taken_over else []
        self.runs.force(slots)
        return self._ticket(tenant, run_id, scopes, slots, None)

    def running(self, tenant: str, run_id: str, *, api_key_id: str = "", agent_id: str = "") -> RunTicket:
        """A run that starts on this replica: the ticket its admission took, or, for a run that started without
        one (taken over from a dead replica, resumed by an expired pause), one taken now, never refused."""
        ticket = self._tickets.get(run_id)
        if ticket is None or ticket.released:
            ticket = self.admit_exempt(tenant, run_id, api_key_id=api_key_id, agent_id=agent_id, taken_over=True)
        return ticket

    def _ticket(self, tenant: str, run_id: str, scopes: list[Scope], slots: list[tuple[Scope, int]],
                queue_slot: Slot | None) -> RunTicket:
        ticket = RunTicket(self, tenant, run_id, scopes, slots, queue_slot)
        self._tickets[run_id] = ticket
        self._running[tenant] += 1
        return ticket

    def _release(self, ticket: RunTicket) -> None:
        self.runs.release(ticket.slots)
        if ticket.queue_slot is not None:
            ticket.queue_slot.release(1 + ticket.tokens / TOKENS_PER_COST_UNIT)
        if self._tickets.get(ticket.run_id) is ticket:
            del self._tickets[ticket.run_id]
        self._running[ticket.tenant] -= 1
        if not self._running[ticket.tenant]:
            del self._running[ticket.tenant]

    def charge_tokens(self, tenant: str, run_id: str, tokens: int) -> None:
        """A model call of run `run_id` used `tokens`: counted for the tenant (metrics, its tokens per minute,
        the run's cost in the fair queue). Never waits."""
        if tokens <= 0:
            return
        metrics.tenant_tokens(tenant, tokens)
        self.tally.use_tokens(tenant, tokens)
        ticket = self._tickets.get(run_id)
        if ticket is not None:
            ticket.tokens += tokens
            scopes = ticket.scopes
        else:
            table = self.source.table
            scopes = table.scopes(tenant) if table.any_limits else []
        for scope in scopes:
            self.tokens.charge(scope, tokens)

    # ---- streams ---------------------------------------------------------------------------------------
    async def hold_stream(self, tenant: str, *, api_key_id: str = "", agent_id: str = "") -> StreamTicket:
        """A caller's stream (Run, WatchRun) of the tenant, or LimitExceeded at its held-streams limit."""
        table = self.source.table
        limited = self.streams.limited(table.scopes(tenant, api_key_id, agent_id)) if table.any_limits else []
        if limited:
            at = await self.streams.acquire(limited)
            if at is not None:
                self._refuse(at, HELD_STREAMS, at.limits.held_streams, CONCURRENCY_RETRY_S)
        self._streams_held[tenant] += 1
        return StreamTicket(self, tenant, limited)

    def _release_stream(self, ticket: StreamTicket) -> None:
        self.streams.release(ticket.slots)
        self._streams_held[ticket.tenant] -= 1
        if not self._streams_held[ticket.tenant]:
            del self._streams_held[ticket.tenant]

    # ---- what metrics read -----------------------------------------------------------------------------
    def tenant_counts(self) -> Iterable[tuple[str, int, int, int]]:
        """(tenant, runs running here, runs waiting for a slot here, streams held here) of every busy tenant."""
        waiting = {t: c.waiting for t, c in self.queue.snapshot().items()} if self.queue is not None else {}
        for tenant in set(self._running) | set(waiting) | set(self._streams_held):
            yield tenant, self._running.get(tenant, 0), waiting.get(tenant, 0), self._streams_held.get(tenant, 0)

    def _refuse(self, scope: Scope, limit: str, quota: float | None, retry_after_s: float, *,
                window_s: int | None = None, window_quota: int | None = None, detail: str = "") -> None:
        metrics.tenant_refused(scope.tenant, limit)
        self.tally.refuse(scope.tenant, limit)
        raise LimitExceeded(scope, limit, quota or 0, retry_after_s, window_s=window_s, window_quota=window_quota,
                            detail=detail)

    # ---- what GetTenantAdmission reads ----------------------------------------------------------------
    def local_figures(self) -> dict[str, dict[str, int]]:
        """This replica's figures of every tenant it has seen: the tally's, and what runs and waits here now."""
        found = {tenant: self.tally.figures(tenant) for tenant in self.tally.tenants()}
        for tenant, running, waiting, _streams in self.tenant_counts():
            counts = found.setdefault(tenant, self.tally.figures(tenant))
            counts["running"], counts["waiting"] = running, waiting
        return found

    async def write_figures(self) -> None:
        """Write the figures that changed since they were last written, and renew the others before they expire
        (a tenant idle here keeps its totals in the sums while this replica lives)."""
        if self.figures is None:
            return
        now = time.monotonic()
        due = {tenant: counts for tenant, counts in self.local_figures().items()
               if (last := self._written.get(tenant)) is None or last[0] != counts
               or now - last[1] >= self.figures.ttl_s / 3}
        if due:
            await self.figures.write(due)
            self._written.update((tenant, (counts, now)) for tenant, counts in due.items())

    async def _write_figures_loop(self) -> None:
        outage = Outage(log, "limits: could not write this replica's admission figures")
        while True:
            await asyncio.sleep(FIGURES_EVERY_S)
            try:
                await self.write_figures()
            except asyncio.CancelledError:
                raise
            except Exception:
                outage.failed()
            else:
                outage.ok()

    async def admission(self, tenant: str) -> TenantAdmission:
        """The tenant's figures over every live replica (as each wrote them, at most FIGURES_EVERY_S ago), and
        its limits in force here (every replica reads the same file)."""
        if self.figures is None:
            counts, replicas = self.local_figures().get(tenant, {}), 1
        else:
            counts, replicas = await self.figures.read(tenant)
        refused = {name.removeprefix("refused."): n for name, n in counts.items() if name.startswith("refused.")}
        table = self.source.table
        return TenantAdmission(
            admitted=counts.get("admitted", 0), refused_by_limit=refused, running=counts.get("running", 0),
            waiting=counts.get("waiting", 0), tokens=counts.get("tokens", 0),
            tokens_last_minute=counts.get("tokens_last_minute", 0), replicas=replicas,
            limits=table.tenant(tenant), share=table.share(tenant))
