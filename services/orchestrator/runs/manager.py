"""Runs from request to stored turn, durable: a run survives its caller, its replica and a pause for the user.

The run manager is the one door the API uses; each job behind it has a module of its own:

| job | module |
|---|---|
| admit a request (what it must carry, the multitask strategy it may ask, its tenant's limits) | runs/admission.py |
| start a run (session, plan, record and lease); make way on a busy or paused session | runs/starts.py |
| drive it: engine -> numbered stream -> journal -> caller | runs/pump.py (journal: store/journal.py) |
| resume it (a UserFillUp answered, a dead replica's run) | runs/resume.py |
| own it through a lease; take over orphans | runs/leases.py |
| interrupts: list, answer once, apply `on_timeout` when a wait expires | runs/interrupts.py |
| end it: turn, trace and status in one round trip | runs/ending.py |
| answer questions about runs, rejoin a stream | runs/queries.py |
| a pause's interrupts: list, resolve once, expire (`on_timeout`) | runs/interrupts.py |
| a child run of another run (AgentCall) | runs/children.py |

A caller that goes away cancels its run, unless it asked to `continue_on_disconnect` (then the run goes on and
its events stay in the stream for `watch`).

Limits per tenant (services/orchestrator/limits/, docs/limits.md): a caller's stream (`execute`, `watch`) holds
one of its tenant's held streams while it is open, and a run one of its runs at once until it ends here,
however it started (`_running`: a run taken over from a dead replica is counted, never refused).
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing
from typing import AsyncIterator

from services.common import context as ctxvars
from services.common.speed_policies import JournalPolicy, journal_policy
from services.orchestrator.engine import events as ev
from services.orchestrator.engine.settings import Services
from services.orchestrator.limits.gate import TenantGate
from services.orchestrator.runs import admission
from services.orchestrator.runs.ending import RunEnding
from services.orchestrator.runs.interrupts import RunInterrupts
from services.orchestrator.runs.leases import Leases, Renewal
from services.orchestrator.runs.local import LocalRuns
from services.orchestrator.runs.pump import END, Pump, PumpServices
from services.orchestrator.runs.queries import RunQueries
from services.orchestrator.runs.resume import RunResumes
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.runs.starts import RunStarts
from services.orchestrator.runs.stream import EventCodec, Numbered, merge_numbered
from services.orchestrator.store import AgentStore, RunStore, SessionStore
from services.orchestrator.store.journal import JournalWriter
from services.orchestrator.store.runs import SessionBusy

__all__ = ["RunManager", "RunSpec"]


class RunManager:
    def __init__(self, agents: AgentStore, sessions: SessionStore, runs: RunStore, services: Services, *,
                 codec: EventCodec, limits: TenantGate, max_attempts: int = 3,
                 journal: JournalPolicy | None = None) -> None:
        self.runs = runs
        self.limits = limits
        services.tokens_used = limits.charge_tokens  # every model call's tokens, charged to its tenant
        self.local = LocalRuns(on_add=self._running)
        self.journal_policy = journal = journal or journal_policy()
        # every run's journal of this replica: one pipeline per write
        self.journals = JournalWriter(runs.redis, pace=lambda: journal.pace(len(self.local)), ttl_s=runs.ttl_s)
        renewal = Renewal(runs, self.local)
        pumps = PumpServices(runs=runs, engine=services, journals=self.journals, codec=codec,
                             ending=RunEnding(sessions, runs), local=self.local,
                             first_write_delay=lambda: journal.first_write_delay(len(self.local)),
                             renew=renewal.now)
        self.starts = RunStarts(agents, sessions, runs, pumps)
        self.resumes = RunResumes(sessions, runs, self.starts, pumps, max_attempts=max_attempts)
        self.leases = Leases(runs, self.local, self.resumes, renewal)
        self.queries = RunQueries(sessions, runs, codec)
        self.interrupts = RunInterrupts(runs, self.starts, codec, self.resumes)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Heartbeat, reaper, interrupt expiries and limit leases of this replica (called once the store is
        reachable)."""
        self.leases.start()
        self.interrupts.start()
        self.limits.start()

    async def aclose(self) -> None:
        """Shutdown: stop what still runs and let every run's end reach Redis before the connection closes."""
        await self.leases.stop()
        await self.interrupts.stop()
        await self.local.stop()
        await self.limits.stop()

    # ------------------------------------------------------------------ a run for a caller
    async def execute(self, spec: RunSpec) -> AsyncIterator[Numbered]:
        """The run's events for its caller. What queued up while the caller sent the previous event goes out
        merged (neighbouring answer deltas as one event): the caller never waits on a timer, and a slow one gets
        fewer, larger events (the one coalescing step of this hop: services/common/coalesce.py's rule)."""
        admission.check_request(spec)
        spec.run_id = spec.run_id or uuid.uuid4().hex
        # Admitted before anything is written: a refusal leaves no session claimed and no run recorded.
        stream = await admission.hold_stream(self.limits, spec)
        try:
            ticket = await admission.admit(self.limits, spec)
            try:
                pump = await self._begin(spec)
            except BaseException:
                # No run started (or, cancelled mid-start, it starts without its caller: `_running` counts it)
                ticket.release()
                raise
            ctxvars.run_id.set(spec.run_id)
            async for item in _follow(pump, spec):
                yield item
        finally:
            if stream is not None:
                stream.release()

    async def watch(self, tenant: str, run_id: str, after_seq: int) -> AsyncIterator[bytes]:
        """A run's stored events after `after_seq`, then its live tail (runs/queries.py), holding one of the
        tenant's streams while the caller reads."""
        stream = await self.limits.hold_stream(tenant)
        try:
            async with aclosing(self.queries.watch(tenant, run_id, after_seq)) as stored:
                async for data in stored:
                    yield data
        finally:
            stream.release()

    def _running(self, pump: Pump) -> None:
        """Every run that starts here holds its ticket (its admission's, or one taken now) until it ends."""
        spec = pump.spec
        ticket = self.limits.running(spec.tenant_id, pump.run_id, api_key_id=spec.api_key_id, agent_id=spec.agent_id)
        pump.task.add_done_callback(lambda _: ticket.release())

    async def _begin(self, spec: RunSpec) -> Pump:
        """The run's pump: a new run, or the answer to its session's pause. A busy session makes way as the
        request's multitask strategy says (runs/starts.py `make_way`), and so does a paused one for a new
        message under interrupt or rollback (`supersede_pause`); then the session is read again."""
        while True:
            record, dsl = await self.starts.load(spec)
            admission.check_session(spec, record)
            if spec.interrupt_id:  # an interrupt answered (resolve): once, before its expiry
                await self.interrupts.claim(spec, record)
            try:
                if record is not None and record.paused_run:
                    # an answer (inputs) answers it; a new message may cancel it first (interrupt, rollback)
                    if not spec.inputs and not spec.interrupt_id and await self.starts.supersede_pause(
                            spec, record, dsl):
                        continue
                    return await self.resumes.answer_pause(spec, record)
                return await self.starts.start_new(spec, record, dsl)
            except SessionBusy as busy:
                await self.starts.make_way(spec, record, dsl, busy)

    # ------------------------------------------------------------------ cancel
    def cancel_local(self, run_id: str) -> None:
        """Called by the cancel listener for every cancel published by any replica."""
        pump = self.local.get(run_id)
        if pump is not None:
            pump.cancel()

    async def recheck_cancels(self) -> None:
        """After the cancel listener (re)subscribes: cancels published while it was away are in the flags."""
        for run_id in self.local.ids():
            if await self.runs.is_cancelled(run_id):
                self.cancel_local(run_id)

    async def cancel(self, tenant: str, *, run_id: str = "", session_id: str = "") -> bool:
        return await self.runs.request_cancel(tenant, run_id=run_id, session_id=session_id)


async def _follow(pump: Pump, spec: RunSpec) -> AsyncIterator[Numbered]:
    """The pump's events for its caller until the run's end; a caller that goes away first detaches (and cancels
    the run unless it asked to continue)."""
    queue = pump.attach()
    got_end = False
    ahead: Numbered | None = None  # taken from the queue while merging, sent next
    try:
        while (item := ahead if ahead is not None else await queue.get()) is not END:
            ahead = None
            while not queue.empty() and item.event.__class__ is ev.MessageDelta:
                following = queue.get_nowait()
                merged = merge_numbered(item, following) if following is not END else None
                if merged is None:
                    ahead = following
                    break
                item = merged
            yield item
        got_end = True
    finally:
        if not got_end:  # the caller went away before the end
            pump.detach()
            if not spec.continue_on_disconnect:
                pump.cancel("client disconnected")
        await asyncio.shield(pump.task)
