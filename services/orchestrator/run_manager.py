"""One canvas run from request to stored turn: resolve the DSL, check it, load the session, run the engine in
its own task, stream its events, persist the turn, and stop at once on cancel (from any replica).

The engine runs in a separate task that feeds a bounded queue: cancelling it (Cancel RPC, a client that
went away) never loses the closing events, and a slow reader slows the engine instead of growing memory.
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
from services.orchestrator.runner import run as run_engine
from services.orchestrator.state import RunRequest, SessionState
from services.orchestrator.store import AgentStore, RunStore, SessionStore
from services.orchestrator.store.sessions import message
from services.orchestrator.turn_record import TurnRecord
from services.orchestrator.validate import ValidationFailed, compile_plan

log = logging.getLogger(__name__)

_QUEUE_SIZE = 256
_DONE = object()


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

    def cancel_local(self, run_id: str) -> None:
        """Called by the cancel listener for every cancel published by any replica."""
        task = self._active.get(run_id)
        if task is not None and not task.done():
            task.cancel()

    async def cancel(self, tenant: str, *, run_id: str = "", session_id: str = "") -> bool:
        return await self.runs.request_cancel(tenant, run_id=run_id, session_id=session_id)

    async def run_log(self, tenant: str, run_id: str, agent_id: str = "") -> tuple[dict[str, str], list[dict], list[dict]]:
        """(status record, tool calls, thoughts) of a run of this tenant (and of `agent_id`, when given)."""
        info = await self.runs.status(tenant, run_id)
        if not info or (agent_id and info.get("agent_id") != agent_id):
            raise NotFound(f"run {run_id!r} not found" + (f" for agent {agent_id!r}" if agent_id else ""))
        return (info, await self.runs.read_log(tenant, run_id, "tool_calls"),
                await self.runs.read_log(tenant, run_id, "thoughts"))

    async def execute(self, spec: RunSpec) -> AsyncIterator[ev.Event]:
        if not spec.tenant_id:
            raise InvalidArgument("tenant_id is required")
        run_id = spec.run_id or uuid.uuid4().hex
        dsl_json, version_id = spec.dsl_json, ""
        if spec.agent_id:
            dsl_json, version_id = await self.agents.resolve_dsl(
                spec.tenant_id, spec.agent_id, version_id=spec.version_id, draft=spec.draft)
        canvas, _ = canvases.parse(dsl_json, require_available=True)
        try:
            plan = compile_plan(canvas)
        except ValidationFailed as exc:
            raise InvalidArgument(str(exc)) from None
        session_id, state = await self._session(spec, version_id, canvas)
        request = RunRequest(run_id=run_id, session_id=session_id, query=spec.query, inputs=spec.inputs,
                             files=spec.files, user_id=spec.user_id, chat_template_kwargs=spec.chat_template_kwargs,
                             tenant_id=spec.tenant_id, overrides=spec.overrides)
        ctxvars.run_id.set(run_id)
        await self.runs.start(spec.tenant_id, run_id, session_id, spec.agent_id)
        queue: asyncio.Queue = asyncio.Queue(_QUEUE_SIZE)
        task = asyncio.create_task(self._produce(plan, request, state, queue), name=f"run-{run_id}")
        self._active[run_id] = task
        if await self.runs.is_cancelled(run_id):  # cancelled before we subscribed
            task.cancel()
        record = TurnRecord()
        started = time.time()
        try:
            while (item := await queue.get()) is not _DONE:
                record.observe(item)
                yield item
            await asyncio.wait([task])
            for item in self._closing_events(task, run_id, session_id, started):
                record.observe(item)
                yield item
        finally:
            self._active.pop(run_id, None)
            if not task.done():  # the client went away: stop the engine now
                task.cancel()
                record.ended("cancelled", "client disconnected")
            await asyncio.shield(self._persist(spec, run_id, session_id, state, record))

    async def _produce(self, plan, request: RunRequest, state: SessionState, queue: asyncio.Queue) -> None:
        try:
            async for event in run_engine(plan, request, state, self.services):
                await queue.put(event)
        finally:
            # The reader waits for this marker; if the reader is gone (client disconnected), give up soon.
            try:
                await asyncio.wait_for(queue.put(_DONE), 5)
            except asyncio.TimeoutError:
                pass

    @staticmethod
    def _closing_events(task: asyncio.Task, run_id: str, session_id: str, started: float) -> list[ev.Event]:
        """The events the engine could not send itself: it was cancelled, or it broke."""
        if task.cancelled():
            message, code = "Task has been canceled", "cancelled"
        elif task.exception() is not None:
            log.error("engine failed in run %s", run_id, exc_info=task.exception())
            message, code = f"internal error in the engine: {type(task.exception()).__name__}", "internal"
        else:
            return []
        now = time.time()
        common = dict(run_id=run_id, session_id=session_id, node_id="", timestamp=now)
        return [
            ev.RunError(message=message, component_id="", code=code, **common),
            ev.RunFinished(outputs={}, elapsed_s=now - started, error=message, cancelled=code == "cancelled", **common),
        ]

    async def _session(self, spec: RunSpec, version_id: str, canvas) -> tuple[str, SessionState]:
        if spec.session_id:
            record = await self.sessions.get(spec.tenant_id, spec.session_id)
            if spec.agent_id and record.agent_id != spec.agent_id:
                raise InvalidArgument(f"session {spec.session_id!r} belongs to another agent")
            state = record.state()
            if state is not None:  # the session has run before: its own history wins
                return record.id, state
        else:
            record = await self.sessions.create(
                spec.tenant_id, agent_id=spec.agent_id, user_id=spec.user_id, version_id=version_id, source="workflow")
        state = SessionState.fresh(canvas.variables)
        if spec.history:
            await self.sessions.save_turn(spec.tenant_id, record.id, [message(r, c) for r, c in spec.history], state)
            for role, content in spec.history:
                state.history.append([role, content])
                state.globals["sys.history"].append(f"{role}: {content}")
        return record.id, state

    async def _persist(self, spec: RunSpec, run_id: str, session_id: str, state: SessionState, record: TurnRecord) -> None:
        try:
            turn = [message("user", spec.query)] if spec.query else []
            if record.answer:
                turn.append(message("assistant", record.text(), record.reference, message_id=run_id))
            await self.sessions.save_turn(spec.tenant_id, session_id, turn, state)
            await self.runs.append_log(spec.tenant_id, run_id, "tool_calls", list(record.tool_calls.values()))
            await self.runs.append_log(spec.tenant_id, run_id, "thoughts", record.thoughts)
            await self.runs.finish(spec.tenant_id, run_id, session_id, status=record.status, error=record.error)
        except Exception:
            log.exception("could not persist run %s of session %s", run_id, session_id)
