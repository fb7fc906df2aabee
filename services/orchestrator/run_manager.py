"""One canvas run from request to stored turn: resolve the DSL, check it, claim the session, run the engine in
its own task, stream its events, persist the turn, and stop at once on cancel (from any replica).

The engine runs in a separate task that feeds a bounded queue, so cancelling it (Cancel RPC, a client that
went away, shutdown) never loses the closing events, and a slow reader pauses the engine's event delivery.
The engine still buffers what a run produces while its reader is slow, so memory is bounded by the size of
one run's output, not by the client's speed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from services.common import context as ctxvars
from services.common.errors import InvalidArgument, NotFound
from services.orchestrator import canvases
from services.orchestrator import events as ev
from services.orchestrator.engine_settings import Services
from services.orchestrator.plan import Plan
from services.orchestrator.runner import run as run_engine
from services.orchestrator.state import RunRequest, SessionState
from services.orchestrator.store import AgentStore, RunStore, SessionStore
from services.orchestrator.store.sessions import message
from services.orchestrator.turn_record import TurnRecord

log = logging.getLogger(__name__)

_QUEUE_SIZE = 256
# A session's state keeps what later turns read, not everything ever seen: RAGFlow reads only the last
# retrieval slot, and history is bounded (components trim it further to their window).
_KEEP_RETRIEVAL = 1
_KEEP_HISTORY = 200
_KEEP_PATH = 1000


@dataclass
class RunSpec:
    """What the Run RPC asked for, free of protobuf."""

    tenant_id: str
    run_id: str = ""
    dsl_json: str = ""
    agent_id: str = ""
    version_id: str = ""
    draft: bool = False
    session_id: str = ""
    query: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    files: list[Any] = field(default_factory=list)
    user_id: str = ""
    chat_template_kwargs: dict[str, Any] | None = None
    history: list[tuple[str, str]] = field(default_factory=list)  # (role, content) of a new session
    overrides: dict[str, Any] = field(default_factory=dict)  # llm_id, system_prompt, enabled_tools, attachments


class RunManager:
    def __init__(self, agents: AgentStore, sessions: SessionStore, runs: RunStore, services: Services) -> None:
        self.agents = agents
        self.sessions = sessions
        self.runs = runs
        self.services = services
        self._active: dict[str, asyncio.Task] = {}
        self._persisting: set[asyncio.Task] = set()

    def cancel_local(self, run_id: str) -> None:
        """Called by the cancel listener for every cancel published by any replica."""
        task = self._active.get(run_id)
        if task is not None and not task.done():
            task.cancel()

    async def recheck_cancels(self) -> None:
        """After the cancel listener (re)subscribes: cancels published while it was away are in the flags."""
        for run_id in list(self._active):
            if await self.runs.is_cancelled(run_id):
                self.cancel_local(run_id)

    async def cancel(self, tenant: str, *, run_id: str = "", session_id: str = "") -> bool:
        return await self.runs.request_cancel(tenant, run_id=run_id, session_id=session_id)

    async def run_log(self, tenant: str, run_id: str, agent_id: str = "") -> tuple[dict[str, str], list[dict], list[dict]]:
        """(status record, tool calls, thoughts) of a run of this tenant (and of `agent_id`, when given)."""
        info = await self.runs.status(tenant, run_id)
        if not info or (agent_id and info.get("agent_id") != agent_id):
            raise NotFound(f"run {run_id!r} not found" + (f" for agent {agent_id!r}" if agent_id else ""))
        return (info, await self.runs.read_log(tenant, run_id, "tool_calls"),
                await self.runs.read_log(tenant, run_id, "thoughts"))

    async def aclose(self) -> None:
        """Shutdown: stop what still runs and let every turn reach Redis before the connection closes."""
        for task in list(self._active.values()):
            task.cancel()
        pending = [*self._active.values(), *self._persisting]
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def execute(self, spec: RunSpec) -> AsyncIterator[ev.Event]:
        if not spec.tenant_id:
            raise InvalidArgument("tenant_id is required")
        run_id = spec.run_id or uuid.uuid4().hex
        record = await self.sessions.get(spec.tenant_id, spec.session_id) if spec.session_id else None
        if record is not None and spec.agent_id and record.agent_id != spec.agent_id:
            raise InvalidArgument(f"session {spec.session_id!r} belongs to another agent")
        plan = await self._plan(spec, record)
        version_id = record.version_id if record is not None else spec.version_id
        session_id, state = await self._session(spec, record, version_id, plan)
        request = RunRequest(run_id=run_id, session_id=session_id, query=spec.query, inputs=spec.inputs,
                             files=spec.files, user_id=spec.user_id, chat_template_kwargs=spec.chat_template_kwargs,
                             tenant_id=spec.tenant_id, overrides=spec.overrides)
        ctxvars.run_id.set(run_id)
        await self.runs.start(spec.tenant_id, run_id, session_id, spec.agent_id)  # claims the session
        turn = TurnRecord()
        started = time.time()
        queue: asyncio.Queue = asyncio.Queue(_QUEUE_SIZE)
        task: asyncio.Task | None = None
        try:
            if await self.runs.is_cancelled(run_id):  # cancelled before it started
                turn.ended("cancelled")
                for item in _closing_events("cancelled", run_id, session_id, started):
                    yield item
                return
            task = asyncio.create_task(self._produce(plan, request, state, queue), name=f"run-{run_id}")
            self._active[run_id] = task
            while (item := await _next(queue, task)) is not None:
                turn.observe(item)
                yield item
            for item in _closing_events(_how_it_broke(task, run_id), run_id, session_id, started):
                turn.observe(item)
                yield item
        finally:
            self._active.pop(run_id, None)
            if task is not None and not task.done():  # the client went away: stop the engine now
                task.cancel()
                turn.ended("cancelled", "client disconnected")
            persist = asyncio.ensure_future(self._persist(spec, run_id, session_id, state, turn))
            self._persisting.add(persist)
            persist.add_done_callback(self._persisting.discard)
            await asyncio.shield(persist)

    async def _plan(self, spec: RunSpec, record) -> Plan:
        """The checked plan: inline DSL, or the agent's version (a session runs the version it was created with)."""
        dsl_json, agent_id, version_id = spec.dsl_json, "", ""
        if spec.agent_id or (record is not None and record.agent_id):
            agent_id = spec.agent_id or record.agent_id
            if record is not None:
                dsl_json, version_id = await self.agents.resolve_dsl(
                    spec.tenant_id, agent_id, version_id=record.version_id, draft=not record.version_id)
            else:
                dsl_json, version_id = await self.agents.resolve_dsl(
                    spec.tenant_id, agent_id, version_id=spec.version_id, draft=spec.draft)
        return await canvases.compiled_plan(spec.tenant_id, agent_id, version_id, dsl_json)

    async def _produce(self, plan: Plan, request: RunRequest, state: SessionState, queue: asyncio.Queue) -> None:
        async for event in run_engine(plan, request, state, self.services):
            await queue.put(event)

    async def _session(self, spec: RunSpec, record, version_id: str, plan: Plan) -> tuple[str, SessionState]:
        if record is not None:
            state = record.state()
            if state is not None:  # the session has run before: its own history wins
                return record.id, state
        else:
            record = await self.sessions.create(
                spec.tenant_id, agent_id=spec.agent_id, user_id=spec.user_id, version_id=version_id, source="workflow")
        state = SessionState.fresh(plan.variables)
        if spec.history:
            await self.sessions.save_turn(spec.tenant_id, record.id, [message(r, c) for r, c in spec.history], state)
            for role, content in spec.history:
                state.history.append([role, content])
                state.globals["sys.history"].append(f"{role}: {content}")
        return record.id, state

    async def _persist(self, spec: RunSpec, run_id: str, session_id: str, state: SessionState, turn: TurnRecord) -> None:
        try:
            messages = [message("user", spec.query)] if spec.query else []
            if turn.answer:
                messages.append(message("assistant", turn.text(), turn.reference, message_id=run_id))
            _compact(state)
            await self.sessions.save_turn(spec.tenant_id, session_id, messages, state)
            await self.runs.append_log(spec.tenant_id, run_id, "tool_calls", list(turn.tool_calls.values()))
            await self.runs.append_log(spec.tenant_id, run_id, "thoughts", turn.thoughts)
        except Exception:
            log.exception("could not persist run %s of session %s", run_id, session_id)
        finally:
            try:
                await self.runs.finish(spec.tenant_id, run_id, session_id, status=turn.status, error=turn.error)
            except Exception:
                log.exception("could not mark run %s finished", run_id)


async def _next(queue: asyncio.Queue, task: asyncio.Task) -> Any:
    """The next event, or None once the engine task has ended and everything it sent was read.

    Waiting on the task as well as the queue means the end is never a message that could be lost."""
    while True:
        if not queue.empty():
            return queue.get_nowait()
        if task.done():
            return None
        getter = asyncio.ensure_future(queue.get())
        await asyncio.wait((getter, task), return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()


def _how_it_broke(task: asyncio.Task, run_id: str) -> str:
    """"cancelled", "internal" (the engine raised), or "" when it ended on its own."""
    if task.cancelled():
        return "cancelled"
    if task.exception() is not None:
        log.error("engine failed in run %s", run_id, exc_info=task.exception())
        return "internal"
    return ""


def _closing_events(kind: str, run_id: str, session_id: str, started: float) -> list[ev.Event]:
    """The events the engine could not send itself. A cancel is not an error: RunFinished(cancelled) says it."""
    if not kind:
        return []
    now = time.time()
    common = dict(run_id=run_id, session_id=session_id, node_id="", timestamp=now)
    if kind == "cancelled":
        return [ev.RunFinished(outputs={}, elapsed_s=now - started, error="Task has been canceled", cancelled=True, **common)]
    message_text = "internal error in the engine; see the orchestrator log"
    return [ev.RunError(message=message_text, component_id="", code="internal", **common),
            ev.RunFinished(outputs={}, elapsed_s=now - started, error=message_text, **common)]


def _compact(state: SessionState) -> None:
    if isinstance(state.retrieval, list):
        state.retrieval[:] = state.retrieval[-_KEEP_RETRIEVAL:]
    state.history[:] = state.history[-_KEEP_HISTORY:]
    hist = state.globals.get("sys.history")
    if isinstance(hist, list):
        state.globals["sys.history"] = hist[-_KEEP_HISTORY:]
    state.path[:] = state.path[-_KEEP_PATH:]
