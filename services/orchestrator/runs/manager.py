"""Runs from request to stored turn, durable: a run survives its caller, its replica and a pause for the user.

One run on a replica is one `_Pump` task, the one owner of the run's event stream: it reads the engine's events
in batches (runner.start), numbers each (seq), hands it to the run's journal in Redis (event stream +
checkpoint, store/journal.py) and to the caller, if one is attached, then stores the turn. The engine ends
every run with its own RunFinished; the pump ends it only when the engine could not (events.run_failed). The
caller reads from a bounded queue; a caller that goes away cancels the run, unless it asked to
`continue_on_disconnect` (then the run goes on and its events stay in the stream for `watch`).

Ownership is a lease (store/runs.py): a heartbeat renews the leases of every run this replica owns; a reaper
takes over runs whose owner stopped renewing and resumes them in place from their checkpoint (same run id,
same stream; what did not finish runs again and its half-sent events are dropped from the stream), or fails
them with the reason when they cannot be resumed. A run that paused at a UserFillUp ends `waiting_for_user`;
the next request on its session that carries `inputs` starts a new run (parent = the paused one) that resumes
there from a copy of the checkpoint.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import time
import uuid
from contextlib import aclosing
from typing import Any, AsyncIterator, Awaitable, Callable

from trellis.canvas.v1 import events_pb2 as ev_pb

from services.common import context as ctxvars
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.orchestrator import canvases, metrics
from services.orchestrator import events as ev
from services.orchestrator.checkpoint import NodeRecord, Replay, node_key
from services.orchestrator.components.user_fill_up import missing_fields
from services.orchestrator.convert import event_from_proto, event_to_proto, merge_events
from services.orchestrator.engine_settings import Services
from services.orchestrator.plan import Plan
from services.orchestrator.runner import Running
from services.orchestrator.runner import start as start_engine
from services.orchestrator.run_spec import RunSpec
from services.orchestrator.state import RunRequest, SessionState
from services.orchestrator.store import AgentStore, RunStore, SessionStore, keys
from services.orchestrator.store.journal import (JournalWriter, RunJournal, copy_checkpoint, drop_unfinished,
                                                 read_checkpoint, read_events, tail_events)
from services.orchestrator.store.runs import TERMINAL
from services.orchestrator.store.sessions import message
from services.orchestrator.turn_record import TurnRecord

log = logging.getLogger(__name__)

__all__ = ["RunManager", "RunSpec"]

_QUEUE_SIZE = 256
# A session's state keeps what later turns read, not everything ever seen: RAGFlow reads only the last
# retrieval slot, and history is bounded (components trim it further to their window).
_KEEP_RETRIEVAL = 1
_KEEP_HISTORY = 200
_KEEP_PATH = 1000
_END = object()
# A new run's start is written once its engine has sent its first request to a peer (the model call goes out
# first; the write's round trip overlaps it), at its end, or after this long, whichever comes first.
_START_WAIT_S = 0.002
_jitter = random.Random()  # its own: background timing leaves the process's global random state alone


class RunManager:
    def __init__(self, agents: AgentStore, sessions: SessionStore, runs: RunStore, services: Services, *,
                 max_attempts: int = 3, journal_delay_s: float = 0.0, journal_busy_runs: int = 16,
                 journal_pace_s: float = 0.0) -> None:
        self.agents = agents
        self.sessions = sessions
        self.runs = runs
        self.services = services
        self.max_attempts = max_attempts  # a run resumed this many times after crashes is failed instead
        self._pumps: dict[str, _Pump] = {}
        self._persisting: set[asyncio.Task] = set()
        self._loops: list[asyncio.Task] = []
        # every run's journal of this replica: one pipeline per write
        self.journals = JournalWriter(runs.redis, pace=self.journal_pace)
        # A run that starts beside this many others delays its journal's first write this long, and while that
        # many run, the writer writes at most once per journal_pace_s (store/journal.py).
        self.journal_delay_s = journal_delay_s
        self.journal_busy_runs = journal_busy_runs
        self.journal_pace_s = journal_pace_s

    def first_write_delay(self) -> float:
        """How long a run starting now waits before its journal's first write: the delay when at least
        `journal_busy_runs` other runs run here, else none (called before the new run is in `_pumps`)."""
        return self.journal_delay_s if len(self._pumps) >= self.journal_busy_runs else 0.0

    def journal_pace(self) -> float:
        """Seconds between two writes of the journal writer now: the pace while at least `journal_busy_runs` runs
        run here, else none."""
        return self.journal_pace_s if len(self._pumps) >= self.journal_busy_runs else 0.0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Heartbeat and reaper of this replica (called once the store is reachable)."""
        self._loops = [asyncio.create_task(self._heartbeat(), name="run-heartbeat"),
                       asyncio.create_task(self._reaper(), name="run-reaper")]

    async def aclose(self) -> None:
        """Shutdown: stop what still runs and let every turn reach Redis before the connection closes."""
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        for pump in list(self._pumps.values()):
            pump.cancel()
        pending = [*(p.task for p in self._pumps.values()), *self._persisting]
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.runs.lease_s / 3)
            pumps = [p for p in self._pumps.values() if p.recorded.done() and p.recorded.result()]  # (leased ones)
            try:
                held = await self.runs.renew([(p.spec.tenant_id, p.run_id, p.session_id) for p in pumps])
            except Exception:
                log.warning("could not renew run leases", exc_info=True)
                continue
            for pump, ok in zip(pumps, held):
                if not ok and not pump.finishing and not pump.task.done():  # (finishing: its own end freed it)
                    log.warning("run %s: lease lost to another replica; stopping here", pump.run_id)
                    pump.abandon()

    async def _reaper(self) -> None:
        while True:
            # Jitter: replicas that started together do not all race for the same orphan.
            await asyncio.sleep(self.runs.lease_s * _jitter.uniform(0.3, 0.6))
            try:
                for tenant, run_id in await self.runs.expired():
                    if run_id in self._pumps:
                        continue
                    attempt = await self.runs.take_over(tenant, run_id)
                    if attempt is not None:
                        log.info("run %s: owner stopped renewing its lease; resuming here (attempt %d)", run_id, attempt)
                        await self._resume_orphan(tenant, run_id, attempt)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("reaper pass failed", exc_info=True)

    # ------------------------------------------------------------------ cancel, status, logs
    def cancel_local(self, run_id: str) -> None:
        """Called by the cancel listener for every cancel published by any replica."""
        pump = self._pumps.get(run_id)
        if pump is not None:
            pump.cancel()

    async def recheck_cancels(self) -> None:
        """After the cancel listener (re)subscribes: cancels published while it was away are in the flags."""
        for run_id in list(self._pumps):
            if await self.runs.is_cancelled(run_id):
                self.cancel_local(run_id)

    async def cancel(self, tenant: str, *, run_id: str = "", session_id: str = "") -> bool:
        return await self.runs.request_cancel(tenant, run_id=run_id, session_id=session_id)

    async def _info(self, tenant: str, run_id: str, agent_id: str = "") -> dict[str, str]:
        info = await self.runs.status(tenant, run_id)
        if not info or (agent_id and info.get("agent_id") != agent_id):
            raise NotFound(f"run {run_id!r} not found" + (f" for agent {agent_id!r}" if agent_id else ""))
        return info

    async def run_log(self, tenant: str, run_id: str, agent_id: str = "") -> tuple[dict[str, str], list[dict], list[dict]]:
        """(status record, tool calls, thoughts) of a run of this tenant (and of `agent_id`, when given)."""
        info = await self._info(tenant, run_id, agent_id)
        return (info, await self.runs.read_log(tenant, run_id, "tool_calls"),
                await self.runs.read_log(tenant, run_id, "thoughts"))

    async def get_run(self, tenant: str, run_id: str, agent_id: str = "") -> tuple[dict[str, str], list[str]]:
        """A run's record and the top-level components it finished so far."""
        info = await self._info(tenant, run_id, agent_id)
        records = await read_checkpoint(self.runs.redis, tenant, run_id)
        return info, [r["n"] for r in records if not r.get("p") and not r.get("s")]

    async def list_runs(self, tenant: str, session_id: str, agent_id: str = "") -> list[tuple[str, dict[str, str]]]:
        record = await self.sessions.get(tenant, session_id)
        if agent_id and record.agent_id != agent_id:
            raise NotFound(f"session {session_id!r} not found for agent {agent_id!r}")
        return await self.runs.list_for_session(tenant, session_id)

    async def watch(self, tenant: str, run_id: str, after_seq: int = 0) -> AsyncIterator[ev_pb.RunEvent]:
        """The run's stored events after `after_seq`, then its live tail, until its RunFinished."""
        await self._info(tenant, run_id)
        await self.runs.settled(tenant, run_id)
        async for seq, fields in tail_events(self.runs.redis, tenant, run_id, after_seq):
            if not seq:  # nothing new for a while: stop if the run ended without a last event to send
                status = (await self.runs.status(tenant, run_id)).get("status", "")
                if status in TERMINAL or status == "waiting_for_user":
                    if not await read_events(self.runs.redis, tenant, run_id, after_seq, count=1):
                        return
                continue
            after_seq = seq
            pb = ev_pb.RunEvent.FromString(fields[b"e"])
            yield pb
            if pb.WhichOneof("kind") == "run_finished":
                return

    # ------------------------------------------------------------------ a run for a caller
    async def execute(self, spec: RunSpec) -> AsyncIterator[ev.Event]:
        """The run's events for its caller. What queued up while the caller sent the previous event goes out
        merged (neighbouring answer deltas as one event): the caller never waits on a timer, and a slow one gets
        fewer, larger events (the one coalescing step of this hop: services/common/coalesce.py's rule)."""
        if not spec.tenant_id:
            raise InvalidArgument("tenant_id is required")
        fresh_id = not spec.run_id  # no other run can hold this id
        run_id = spec.run_id = spec.run_id or uuid.uuid4().hex
        record, dsl = await self._load(spec)
        if record is not None and spec.agent_id and record.agent_id != spec.agent_id:
            raise InvalidArgument(f"session {spec.session_id!r} belongs to another agent")
        if record is not None and record.paused_run:
            pump = await self._resume_paused(spec, record)
        else:
            pump = await self._start_new(spec, record, dsl, fresh_id=fresh_id)
        ctxvars.run_id.set(run_id)
        queue = pump.attach()
        got_end = False
        ahead: Any = None  # taken from the queue while merging, sent next
        try:
            while (item := ahead if ahead is not None else await queue.get()) is not _END:
                ahead = None
                while item.__class__ is ev.MessageDelta and not queue.empty():
                    following = queue.get_nowait()
                    merged = merge_events(item, following)
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

    async def _load(self, spec: RunSpec) -> tuple[Any, tuple[str, str] | None]:
        """The session a request continues (its state, not its messages) and, when the request names the version
        that session runs (the gateway does; "" is the draft), that version's (dsl_json, version_id): one round
        trip, or none for the version when `agents` keeps it."""
        if not spec.session_id:
            return None, None
        cached = self.agents.cached_dsl(spec.tenant_id, spec.agent_id, spec.version_id) if spec.agent_id else None
        if not spec.agent_id or cached is not None:
            record = await self.sessions.get(spec.tenant_id, spec.session_id, messages=False)
            return record, cached if record.agent_id == spec.agent_id and record.version_id == spec.version_id else None
        token = self.agents.resolved_cache.token()
        async with self.runs.redis.pipeline(transaction=False) as pipe:
            self.sessions.queue_get(pipe, spec.tenant_id, spec.session_id)
            self.agents.queue_resolve(pipe, spec.tenant_id, spec.agent_id, spec.version_id)
            raw, *replies = await pipe.execute()
        record = self.sessions.record(spec.tenant_id, spec.session_id, raw)
        if record.agent_id != spec.agent_id or record.version_id != spec.version_id:
            return record, None  # not the version the session runs: _plan reads that one
        dsl = self.agents.resolved(spec.agent_id, spec.version_id, replies)
        self.agents.keep_dsl(token, spec.tenant_id, spec.agent_id, spec.version_id, dsl)
        return record, dsl

    async def _start_new(self, spec: RunSpec, record, dsl: tuple[str, str] | None = None, *,
                         fresh_id: bool = False) -> _Pump:
        if record is None and spec.create_session and spec.agent_id:  # the new session records the version resolved now
            dsl = await self.agents.resolve_dsl(spec.tenant_id, spec.agent_id, version_id=spec.version_id, draft=spec.draft)
            spec.version_id = dsl[1]
        plan = await self._plan(spec, record, dsl)
        if record is not None and spec.agent_id == "":
            spec.agent_id = record.agent_id
        spec.version_id = record.version_id if record is not None else spec.version_id
        session_id, state, create_session = await self._session(spec, record, plan)
        spec.session_id = session_id

        # A new session and a new run id: nothing can refuse this start (no other run holds either, no cancel
        # names them yet) but Redis itself, so it is written without checks (RunStore.start's `fresh`).
        fresh = create_session is not None and fresh_id

        def start() -> Awaitable[bool]:
            return self.runs.start(spec.tenant_id, spec.run_id, session_id, spec.agent_id, spec=spec.to_json(),
                                   before=create_session, fresh=fresh)

        if not fresh:
            return self._launch(spec, plan, state, replay=None, cancelled=await start())
        # The engine starts now and the start is written behind its model call (_START_WAIT_S); the run's
        # journal, its end, its lease and its caller wait for the record.
        pump = self._launch(spec, plan, state, replay=None, cancelled=False, write_start=start)
        pump.attach()
        try:
            error = await asyncio.shield(pump.start_landed)
        except asyncio.CancelledError:  # the caller went away meanwhile: as in execute, once the start has landed
            pump.detach()
            if not spec.continue_on_disconnect:
                pump.cancel("client disconnected")
            raise
        if error is not None:
            raise error
        return pump

    async def _resume_paused(self, spec: RunSpec, record) -> _Pump:
        """The session waits at a UserFillUp: this request's `inputs` answer it, in a new run from a copy of
        the paused run's checkpoint (nothing that finished runs again, Begin included)."""
        parent_id = record.paused_run
        parent = await self.runs.status(spec.tenant_id, parent_id)
        waiting = parent.get("paused_node", "")
        if parent.get("status") != "waiting_for_user" or not waiting:
            await self.sessions.set_paused_run(spec.tenant_id, record.id, "")
            return await self._start_new(spec, record)
        parent_spec = RunSpec.from_json(json.loads(parent.get("spec") or "{}"))
        plan = await self._plan(parent_spec, record)
        component = waiting.rsplit("/", 1)[-1]
        if not spec.inputs:
            raise InvalidArgument(f"session {record.id!r} is waiting for the user's input to {component}: "
                                  "send the answers as `inputs`, or cancel the run")
        missing = missing_fields(plan.component_params(component), spec.inputs)
        if missing:
            raise InvalidArgument(f"{component}: inputs {', '.join(missing)} required to continue")
        spec.agent_id, spec.version_id, spec.dsl_json = record.agent_id, record.version_id, parent_spec.dsl_json
        spec.draft = parent_spec.draft
        spec.session_id = record.id
        state = record.state() or SessionState.fresh(plan.variables)
        await self.runs.start(spec.tenant_id, spec.run_id, record.id, spec.agent_id, spec=spec.to_json(),
                              parent_run_id=parent_id)
        await self.runs.set_fields(spec.tenant_id, spec.run_id, resume_node=waiting)
        await copy_checkpoint(self.runs.redis, spec.tenant_id, parent_id, spec.run_id)
        await self.runs.finish(spec.tenant_id, parent_id, "", status="succeeded")
        await self.runs.set_fields(spec.tenant_id, parent_id, resumed_by=spec.run_id)
        await self.sessions.set_paused_run(spec.tenant_id, record.id, "")
        records = [NodeRecord.from_json(r) for r in await read_checkpoint(self.runs.redis, spec.tenant_id, spec.run_id)]
        return self._launch(spec, plan, state, replay=Replay(records, {waiting: spec.inputs}))

    async def _resume_orphan(self, tenant: str, run_id: str, attempt: int) -> None:
        """Resume a run whose replica died, in place, or fail it with the reason and free its session."""
        info = await self.runs.status(tenant, run_id)
        session_id = info.get("session_id", "")
        try:
            if attempt > self.max_attempts:
                raise FailedPrecondition(f"resume attempts used up ({self.max_attempts})")
            spec = RunSpec.from_json(json.loads(info.get("spec") or "{}"))
            record = await self.sessions.get(tenant, session_id, messages=False) if session_id else None
            if session_id and not await self.runs.claim_session(tenant, session_id, run_id):
                raise FailedPrecondition("its session took another run meanwhile")
            plan = await self._plan(spec, record)
            state = (record.state() if record is not None else None) or SessionState.fresh(plan.variables)
            records = [NodeRecord.from_json(r) for r in await read_checkpoint(self.runs.redis, tenant, run_id)]
            last_seq = await drop_unfinished(self.runs.redis, tenant, run_id)
            await self.runs.set_fields(tenant, run_id, resuming="")
            turn = TurnRecord()
            answer: list[str] = []  # what the stored stream already answered: the engine's answer starts from it
            for _, fields in await read_events(self.runs.redis, tenant, run_id, 0, count=100_000):
                event = event_from_proto(ev_pb.RunEvent.FromString(fields[b"e"]))
                turn.observe(event)
                if event.__class__ is ev.MessageDelta and not event.path:
                    answer.append(event.content)
            resume_node = info.get("resume_node", "")
            replay = Replay(records, {resume_node: spec.inputs} if resume_node else None, answer="".join(answer))
        except Exception as exc:  # NotFound (version or session deleted), FailedPrecondition, a broken record
            reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.warning("run %s cannot be resumed: %s", run_id, reason)
            await self.runs.finish(tenant, run_id, session_id, status="failed", error=f"cannot resume: {reason}")
            return
        # In place: its RunStarted is in the stream already, unless it died before its journal's first write.
        pump = self._launch(spec, plan, state, replay=replay, in_place=last_seq > 0, first_seq=last_seq + 1, turn=turn)
        pump.detach()

    def _launch(self, spec: RunSpec, plan: Plan, state: SessionState, *, replay: Replay | None,
                in_place: bool = False, first_seq: int = 1, turn: TurnRecord | None = None,
                cancelled: bool | None = None, write_start: Callable[[], Awaitable[bool]] | None = None) -> _Pump:
        """`cancelled`: whether a cancel came before the start, when the caller knows (else it is asked);
        `write_start`: what writes the run's start when the pump is to write it (else it is written)."""
        pump = _Pump(self, spec, plan, state, replay, in_place, first_seq, turn or TurnRecord(), cancelled, write_start)
        self._pumps[spec.run_id] = pump
        pump.task.add_done_callback(lambda _: self._pumps.pop(spec.run_id, None))
        return pump

    # ------------------------------------------------------------------ plan and session
    async def _plan(self, spec: RunSpec, record, dsl: tuple[str, str] | None = None) -> Plan:
        """The checked plan: inline DSL, or the agent's version (a session runs the version it was created with);
        `dsl`: that version's (dsl_json, version_id) when already read."""
        dsl_json, agent_id, version_id = spec.dsl_json, "", ""
        if spec.agent_id or (record is not None and record.agent_id):
            agent_id = spec.agent_id or record.agent_id
            if dsl is not None:
                dsl_json, version_id = dsl
            elif record is not None:
                dsl_json, version_id = await self.agents.resolve_dsl(
                    spec.tenant_id, agent_id, version_id=record.version_id, draft=not record.version_id)
            else:
                dsl_json, version_id = await self.agents.resolve_dsl(
                    spec.tenant_id, agent_id, version_id=spec.version_id, draft=spec.draft)
        return await canvases.compiled_plan(spec.tenant_id, agent_id, version_id, dsl_json)

    async def _session(self, spec: RunSpec, record, plan: Plan) -> tuple[str, SessionState, Any]:
        """(session id, its state, what queues a new session's writes or None): a new session is written in the
        round trip that starts the run (RunStore.start's `before`)."""
        if record is not None:
            state = record.state()
            if state is not None:  # the session has run before: its own history wins
                return record.id, state, None
        state = SessionState.fresh(plan.variables)
        history = [message(r, c) for r, c in spec.history]
        for role, content in spec.history:
            state.history.append([role, content])
            state.globals["sys.history"].append(f"{role}: {content}")
        spec.history = []  # stored with the session: a resume of this run must not add them again
        if record is not None:  # made by CreateSession, never run
            if history:
                await self.sessions.save_turn(spec.tenant_id, record.id, history, state)
            return record.id, state, None
        if spec.create_session and spec.agent_id:  # as SessionServicer.CreateSession: an empty greeting too
            source, greeting = "agent", [message("assistant", canvases.prologue(plan.canvas))]
        else:
            source, greeting = "workflow", []
        session_id = uuid.uuid4().hex

        def create(pipe) -> None:
            self.sessions.queue_create(pipe, spec.tenant_id, agent_id=spec.agent_id, user_id=spec.user_id,
                                       version_id=spec.version_id, source=source, messages=greeting + history,
                                       session_id=session_id, state=state if history else None)

        return session_id, state, create

    async def _persist(self, pump: _Pump, *, with_journal: bool) -> bool:
        """The turn, the run's trace and its end (and `with_journal`, the journal's pending batch first), in one
        round trip. Whether it reached Redis (then `pump.persisted`)."""
        spec, turn, tenant = pump.spec, pump.turn, pump.spec.tenant_id
        messages = [message("user", spec.query)] if spec.query else []
        text = turn.text()
        if text:
            messages.append(message("assistant", text, turn.reference, message_id=pump.run_id))
        _compact(pump.state)
        paused = pump.run_id if turn.status == "waiting_for_user" else ""
        try:
            async with self.runs.redis.pipeline(transaction=False) as pipe:
                journaled = with_journal and pump.journal.queue_pending(pipe)
                await self.sessions.queue_save_turn(pipe, tenant, pump.session_id, messages, pump.state, paused_run=paused)
                self.runs.queue_log(pipe, tenant, pump.run_id, "tool_calls", list(turn.tool_calls.values()))
                self.runs.queue_log(pipe, tenant, pump.run_id, "thoughts", turn.thoughts)
                if paused:
                    pipe.hset(keys.run(tenant, pump.run_id), "paused_node", turn.waiting_for)
                await self.runs.queue_finish(pipe, tenant, pump.run_id, pump.session_id, status=turn.status, error=turn.error)
                replies = await pipe.execute(raise_on_error=False)
        except Exception:
            if with_journal:  # the journal's own retries store its batch; then the turn goes alone
                log.warning("run %s: storing its end failed; retrying", pump.run_id, exc_info=True)
            else:
                log.exception("could not persist run %s of session %s", pump.run_id, pump.session_id)
            return False
        if journaled:
            if isinstance(replies[0], Exception):
                log.error("run %s: storing its last events failed: %s", pump.run_id, replies[0])
            replies = replies[1:]
        saved, *rest = replies
        if saved == 0:
            log.warning("run %s: session %s was deleted meanwhile; its turn was not stored", pump.run_id, pump.session_id)
        for reply in rest:
            if isinstance(reply, Exception):
                log.error("run %s: storing its end failed: %s", pump.run_id, reply)
        pump.persisted = True
        return True


class _Pump:
    """One run on this replica: engine -> seq -> journal -> caller (when attached) -> stored turn."""

    def __init__(self, manager: RunManager, spec: RunSpec, plan: Plan, state: SessionState, replay: Replay | None,
                 in_place: bool, first_seq: int, turn: TurnRecord, cancelled: bool | None,
                 write_start: Callable[[], Awaitable[bool]] | None) -> None:
        self.manager = manager
        self.spec = spec
        self.run_id = spec.run_id
        self.session_id = spec.session_id
        self.plan = plan
        self.state = state
        self.replay = replay
        self.in_place = in_place  # a crashed run resumed under its own id: its RunStarted is in the stream
        self.seq = first_seq - 1
        self.turn = turn
        self.out: asyncio.Queue | None = None
        self._for_caller = ev.ANSWER_EVENTS if spec.answer_only else None  # None: every event
        self.started = time.time()
        self.journal = RunJournal(manager.journals, spec.tenant_id, spec.run_id, held=write_start is not None,
                                  first_write_delay_s=manager.first_write_delay())
        loop = asyncio.get_running_loop()
        # True once the run's start is in Redis, False if it never got there: its end waits for it.
        self.recorded: asyncio.Future[bool] = loop.create_future()
        # While the pump is to write the start: what writes it (once), and what the caller waits for (None once
        # the start is recorded, else the error that kept it out).
        self._write_start = write_start
        self.start_landed: asyncio.Future[BaseException | None] = loop.create_future()
        if write_start is None:
            self.recorded.set_result(True)
            self.start_landed.set_result(None)
        else:
            self._start_timer = loop.call_later(_START_WAIT_S, self.write_start)
        self.engine: Running | None = None
        self._cancel_asked = False  # the engine stops and sends its own closing RunFinished(cancelled)
        self._cancelled_early = cancelled
        self._stop_reason = ""
        self._abandoned = False
        self.finishing = False  # storing the turn: the lease is released on purpose
        self.persisted = False
        self.task = asyncio.create_task(self._run(), name=f"run-{spec.run_id}")

    def attach(self) -> asyncio.Queue:
        if self.out is None:
            self.out = asyncio.Queue(_QUEUE_SIZE)
        return self.out

    def write_start(self) -> None:
        """Send the run's start (once): its engine's first peer call is on its way, it waited long enough, or
        the run ended."""
        write, self._write_start = self._write_start, None
        if write is None:
            return
        self._start_timer.cancel()
        asyncio.ensure_future(write()).add_done_callback(self.start_written)

    def start_written(self, write: asyncio.Future) -> None:
        """The write of the run's start ended: the run is recorded, or it never reached Redis and stops here
        without writing anything (its caller gets the error)."""
        error = asyncio.CancelledError() if write.cancelled() else write.exception()
        self.start_landed.set_result(error)
        if error is None:
            self.recorded.set_result(True)
            self.journal.release()
            return
        self.recorded.set_result(False)
        self._abandoned = True
        self.out = None
        self.journal.abort()
        self.task.cancel()

    def detach(self) -> None:
        """The caller went away but the run goes on; its events stay in the stream."""
        out, self.out = self.out, None
        if out is not None:
            while not out.empty():  # unblock a put waiting on the caller's full queue
                out.get_nowait()

    def cancel(self, reason: str = "") -> None:
        self._stop_reason = self._stop_reason or reason
        self._cancel_asked = True
        if self.engine is not None:
            self.engine.cancel()

    def abandon(self) -> None:
        """Another replica owns the run now: stop here without writing its end or its journal; an attached
        caller is told where the run went (it rejoins it on any replica)."""
        self._abandoned = True
        out = self.out
        self.detach()
        self.journal.abort()
        self.task.cancel()
        if out is not None:
            for item in self._failed("the run moved to another replica: rejoin it (WatchRun, or Last-Event-ID over "
                                     "HTTP)", "moved"):
                out.put_nowait(item)
            out.put_nowait(_END)

    async def _run(self) -> None:
        held: ev.NodeFinished | None = None  # journaled together with its checkpoint record, which comes next
        try:
            early = self._cancelled_early
            if early or (early is None and await self.manager.runs.is_cancelled(self.run_id)):
                self._cancel_asked = True  # cancelled before it started: the engine ends it at once
            if self._write_start is not None:  # the engine's tasks inherit this
                ctxvars.on_peer_call.set(self.write_start)
            self.engine = start_engine(self.plan, self._request(), self.state, self.manager.services,
                                       replay=self.replay, checkpoints=True)
            if self._cancel_asked:
                self.engine.cancel()
            broke = False
            try:
                async with aclosing(self.engine.batches()) as batches:
                    async for batch in batches:
                        for item in _merge_deltas(batch):
                            if item.__class__ is NodeRecord:
                                if held is not None:
                                    self._journal(held, item.to_json())
                                    held = None
                                continue
                            if held is not None:  # no record followed (not expected): store it alone
                                self._journal(held)
                                held = None
                            if item.__class__ is ev.RunStarted and self.in_place:
                                continue
                            if item.__class__ is ev.NodeFinished:
                                held = self._number(item)
                                if not item.skipped:
                                    metrics.component_finished(item.component_type, item.error is not None, item.elapsed_s)
                                await self._deliver(item)
                            else:
                                await self._emit(item)
            except Exception:  # a bug: the engine ends every run with its own RunFinished otherwise
                log.exception("engine failed in run %s", self.run_id)
                broke = True
            if held is not None:
                self._journal(held)
                held = None
            if broke:
                for item in self._failed("internal error in the engine; see the orchestrator log", "internal"):
                    await self._emit(item)
            await self.journal.settle()  # the last batch is stored with the turn (_finish)
        except asyncio.CancelledError:
            if self._abandoned:
                return
            self.turn.ended("cancelled", self._stop_reason or "Task has been canceled")
        except Exception as exc:  # the journal gave up (Redis unreachable): stop with a clear error
            self.turn.ended("failed", str(exc))
            out = self.out
            for item in self._failed(str(exc), "internal"):  # for the caller only: nothing can be stored
                self._number(item)
                if out is not None and not out.full():
                    out.put_nowait(item)
        finally:
            if self.engine is not None:
                self.turn.answer = self.engine.answer
            if self.turn.status == "cancelled" and self._stop_reason:
                self.turn.error = self._stop_reason
            if self.out is not None:
                await self.out.put(_END)
            if not self._abandoned:
                self.finishing = True
                persist = asyncio.ensure_future(self._finish())
                self.manager._persisting.add(persist)
                persist.add_done_callback(self.manager._persisting.discard)
                await asyncio.shield(persist)

    async def _finish(self) -> None:
        """The journal's last batch, the turn and the run's end in one round trip; when that fails, the journal
        stores its batch with its own retries, then the turn is stored on its own."""
        self.write_start()
        if not await self.recorded:  # (a run faster than its start's round trip waits for it here)
            return
        metrics.RUNS.labels(self.turn.status).inc()
        try:
            await self.journal.settle()  # (again, after a cancel): nothing in flight, the pending batch comes last
            settled = True
        except Exception:  # the journal gave up; aclose says so below
            settled = False
        if await self.manager._persist(self, with_journal=settled):
            self.journal.pending_written()
        try:
            await self.journal.aclose()
        except Exception:
            log.warning("run %s: journal not fully stored", self.run_id, exc_info=True)
        if not self.persisted:
            await self.manager._persist(self, with_journal=False)

    def _request(self) -> RunRequest:
        spec = self.spec
        return RunRequest(run_id=self.run_id, session_id=self.session_id, query=spec.query, inputs=spec.inputs,
                          files=spec.files, user_id=spec.user_id, chat_template_kwargs=spec.chat_template_kwargs,
                          tenant_id=spec.tenant_id, overrides=spec.overrides, custom_header=spec.custom_header)

    def _number(self, event: ev.Event) -> ev.Event:
        """The event's place in the run's stream (seq), and what the turn keeps of it."""
        event.__dict__["seq"] = self.seq = self.seq + 1
        self.turn.observe(event)
        return event

    async def _emit(self, event: ev.Event) -> None:
        """Numbered, journaled, then to the caller: the one way an event enters the run's stream."""
        self._journal(self._number(event))
        await self._deliver(event)

    def _failed(self, message_text: str, code: str) -> list[ev.Event]:
        return ev.run_failed(self.run_id, self.session_id, message_text, code, time.time() - self.started)

    def _journal(self, event: ev.Event, record: dict[str, Any] | None = None) -> None:
        node = node_key(event.path, event.node_id) if event.node_id else ""
        self.journal.event(event.seq, functools.partial(_event_bytes, event), node, record=record)

    async def _deliver(self, event: ev.Event) -> None:
        out = self.out
        if out is not None and (self._for_caller is None or event.__class__ in self._for_caller):
            await out.put(event)


def _event_bytes(event: ev.Event) -> bytes:
    """An event as its run's stream stores it (made when its journal batch is written)."""
    return event_to_proto(event).SerializeToString()


def _merge_deltas(batch: list[Any]) -> list[Any]:
    """Answer deltas that queued up while the previous batch was being handled become one event (one seq, one
    stream entry): per-token work only when the pipeline keeps up."""
    if len(batch) < 2:
        return batch
    out: list[Any] = []
    for item in batch:
        if out and item.__class__ is ev.MessageDelta:
            merged = merge_events(out[-1], item)
            if merged is not None:
                out[-1] = merged
                continue
        out.append(item)
    return out


def _compact(state: SessionState) -> None:
    if isinstance(state.retrieval, list):
        state.retrieval[:] = state.retrieval[-_KEEP_RETRIEVAL:]
    state.history[:] = state.history[-_KEEP_HISTORY:]
    hist = state.globals.get("sys.history")
    if isinstance(hist, list):
        state.globals["sys.history"] = hist[-_KEEP_HISTORY:]
    state.path[:] = state.path[-_KEEP_PATH:]
