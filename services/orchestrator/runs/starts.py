"""Where a run starts: the session it continues (or a new one), the checked plan of the canvas it runs, and
its record and lease, written in one round trip before its engine starts (store/runs.py `RunStore.start`)."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from typing import Any, Callable

import grpc

from services.common.errors import DeadlineExceeded, ServiceError
from services.orchestrator.engine import canvases
from services.orchestrator.engine.plan import Plan
from services.orchestrator.engine.state import SessionState
from services.orchestrator.runs import admission
from services.orchestrator.runs.pump import Pump, PumpServices
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.store import AgentStore, RunStore, SessionRecord, SessionStore
from services.orchestrator.store.runs import TERMINAL, SessionBusy
from services.orchestrator.store.sessions import message

# (dsl_json, version_id) of an agent's version, as read
Dsl = tuple[str, str]
# How long a double-text waits for the session's current run to end: cancelled (interrupt, rollback), or
# running to its end (enqueue). Past it the request fails with DEADLINE_EXCEEDED and the session is as it was.
CANCEL_WAIT_S = 30.0
ENQUEUE_WAIT_S = 600.0
_POLL_S = 0.02


class Aborted(ServiceError):
    """A double-text refused (`reject`): ABORTED, HTTP 409."""

    code = grpc.StatusCode.ABORTED


def _caller_gone(launch: asyncio.Future, *, cancel: bool) -> None:
    """A launch whose caller left meanwhile: the run goes on without it, or (`cancel`) ends as cancelled."""
    if not launch.cancelled() and launch.exception() is None:
        pump = launch.result()
        pump.detach()
        if cancel:
            pump.cancel("client disconnected")


class RunStarts:
    def __init__(self, agents: AgentStore, sessions: SessionStore, runs: RunStore, pumps: PumpServices) -> None:
        self.agents = agents
        self.sessions = sessions
        self.runs = runs
        self.pumps = pumps

    async def load(self, spec: RunSpec) -> tuple[SessionRecord | None, Dsl | None]:
        """The session a request continues (its state, not its messages) and, when the request names the version
        that session runs (the gateway does; "" is the draft), that version's DSL: one round trip, or none for
        the version when `agents` keeps it."""
        if not spec.session_id:
            return None, None
        cached = self.agents.cached_dsl(spec.tenant_id, spec.agent_id, spec.version_id) if spec.agent_id else None
        if not spec.agent_id or cached is not None:
            record = await self.sessions.get(spec.tenant_id, spec.session_id, messages=False)
            same = record.agent_id == spec.agent_id and record.version_id == spec.version_id
            return record, cached if same else None
        token = self.agents.resolved_cache.token()
        async with self.runs.redis.pipeline(transaction=False) as pipe:
            self.sessions.queue_get(pipe, spec.tenant_id, spec.session_id)
            self.agents.queue_resolve(pipe, spec.tenant_id, spec.agent_id, spec.version_id)
            raw, *replies = await pipe.execute()
        record = self.sessions.record(spec.tenant_id, spec.session_id, raw)
        if record.agent_id != spec.agent_id or record.version_id != spec.version_id:
            return record, None  # not the version the session runs: `plan` reads that one
        dsl = self.agents.resolved(spec.agent_id, spec.version_id, replies)
        self.agents.keep_dsl(token, spec.tenant_id, spec.agent_id, spec.version_id, dsl)
        return record, dsl

    async def start_new(self, spec: RunSpec, record: SessionRecord | None, dsl: Dsl | None = None) -> Pump:
        """A run from the canvas' start, on its session (a new one when the request names none)."""
        if record is None and spec.create_session and spec.agent_id:  # the new session records the version resolved now
            dsl = await self.agents.resolve_dsl(spec.tenant_id, spec.agent_id, version_id=spec.version_id,
                                                draft=spec.draft)
            spec.version_id = dsl[1]
        plan = await self.plan(spec, record, dsl)
        if record is not None and spec.agent_id == "":
            spec.agent_id = record.agent_id
        spec.version_id = record.version_id if record is not None else spec.version_id
        session_id, state, create_session = await self._session(spec, record, plan)
        spec.session_id = session_id

        async def record_and_launch() -> Pump:
            cancelled = await self.runs.start(spec.tenant_id, spec.run_id, session_id, spec.agent_id,
                                              spec=spec.to_json(), before=create_session)
            pump = Pump(self.pumps, spec, plan, state, cancelled=cancelled)
            pump.attach()  # before its first event: the caller gets every one
            return pump

        # Once sent, the start may land whatever the caller does: a caller gone meanwhile leaves no run behind
        # that nobody drives; it ends as cancelled (or goes on, when the caller asked to continue).
        launch = asyncio.ensure_future(record_and_launch())
        try:
            return await asyncio.shield(launch)
        except asyncio.CancelledError:
            launch.add_done_callback(functools.partial(_caller_gone, cancel=not spec.continue_on_disconnect))
            raise

    async def make_way(self, spec: RunSpec, record: SessionRecord | None, dsl: Dsl | None, busy: SessionBusy) -> None:
        """A run that found its session busy (double-texting): apply its strategy (admission.multitask_strategy)
        to the run holding it and return once that run ended, so the caller starts again from the session as it
        is now; raise when the strategy refuses (none: `busy` itself; reject: ABORTED). A claim left by a run
        that has ended is freed first, whatever the strategy."""
        if await self._left_by_an_ended_run(spec.tenant_id, busy):
            return
        strategy = admission.multitask_strategy(spec, await self.plan(spec, record, dsl))
        if not strategy:
            raise busy
        if strategy == "reject":
            raise Aborted(f"session {busy.session_id!r} is busy with run {busy.holder!r} "
                          "(multitask_strategy reject)")
        tenant = spec.tenant_id
        if strategy in ("interrupt", "rollback"):
            await self.runs.request_cancel(tenant, run_id=busy.holder)
        info = await self._ended(tenant, busy.holder, CANCEL_WAIT_S if strategy != "enqueue" else ENQUEUE_WAIT_S)
        if strategy == "rollback":
            query = json.loads(info.get("spec") or "{}").get("query", "")
            await self.sessions.remove_turn(tenant, busy.session_id, busy.holder, query)

    async def _left_by_an_ended_run(self, tenant: str, busy: SessionBusy) -> bool:
        """Whether the claim was left by a run that has ended, and is now freed. A run's end frees its session in
        the round trip that stores its status, but on a Redis Cluster the two land on different nodes: a caller
        that saw the end may find the claim still there for a moment (or for the rest of the lease, when that
        node's write failed)."""
        status = (await self.runs.status(tenant, busy.holder)).get("status")
        if status not in TERMINAL and status != "waiting_for_user":  # running, or its record not written yet
            return False
        await self.runs.free_session(tenant, busy.session_id, busy.holder)
        return True

    async def supersede_pause(self, spec: RunSpec, record: SessionRecord, dsl: Dsl | None) -> bool:
        """A new message (no `inputs`) on a session paused at a UserFillUp, under `interrupt` or `rollback`: the
        paused run ends cancelled (`rollback`: its turn leaves the session too) and the caller starts afresh from
        the session as it is now (True). A paused session is not busy: under any other strategy the request
        answers the pause as before (False)."""
        strategy = admission.multitask_strategy(spec, await self.plan(spec, record, dsl))
        if strategy not in ("interrupt", "rollback"):
            return False
        tenant, paused = spec.tenant_id, record.paused_run
        await self.runs.request_cancel(tenant, run_id=paused)
        if strategy == "rollback":
            info = await self.runs.status(tenant, paused)
            query = json.loads(info.get("spec") or "{}").get("query", "")
            await self.sessions.remove_turn(tenant, record.id, paused, query)
        return True

    async def _ended(self, tenant: str, run_id: str, bound_s: float) -> dict[str, str]:
        """The record of `run_id` once it is no longer running (its turn stored: runs/ending.py writes both in
        one round trip), polled for at most `bound_s`."""
        deadline = time.monotonic() + bound_s
        while True:
            info = await self.runs.status(tenant, run_id)
            if info.get("status") in TERMINAL or info.get("status") == "waiting_for_user" or not info:
                return info
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"run {run_id!r} still holds its session after {bound_s:g} s")
            await asyncio.sleep(_POLL_S)

    async def plan(self, spec: RunSpec, record: SessionRecord | None, dsl: Dsl | None = None) -> Plan:
        """The checked plan: inline DSL, or the agent's version (a session runs the version it was created with);
        `dsl`: that version's when already read."""
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

    async def _session(self, spec: RunSpec, record: SessionRecord | None,
                       plan: Plan) -> tuple[str, SessionState, Callable[[Any], None] | None]:
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

