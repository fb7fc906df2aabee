"""Interrupts: what a paused run waits for (its UserFillUp's form and tips, and when the wait expires), and
answering one, once.

An interrupt's id is "<run id>:<component>". Answering it is what a completion with `inputs` on the session
does (runs/resume.py `answer_pause`), after `claim`: an atomic 'answered' mark on the paused run, so a second
answer is refused (ABORTED) whatever replica it reaches; a wait past its UserFillUp's `timeout_s` (counted
from the pause) is refused too (OUT_OF_RANGE).

When that wait expires, one replica applies the UserFillUp's `on_timeout` (`expire`, every replica's loop): a
pause with a timeout is indexed by its expiry when its run ends waiting (store/runs.py `queue_pause_expiry`), so a
pass is one read; a claim in that index picks the one replica that acts, and the run's 'answered' mark
("timeout") keeps a resolve from answering it meanwhile. `fail` and `cancel` end the run so and free its
session; `defaults` answers the form with its fields' default `value`s, as a resolve would (a new run, parent =
the paused one, that no caller follows: its events and end are stored as any run's).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from typing import TYPE_CHECKING, Any

import grpc

from services.common.errors import InvalidArgument, NotFound, ServiceError
from services.orchestrator.components.user_fill_up import default_answer, missing_fields
from services.orchestrator.engine import events as ev
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.runs.starts import Aborted, RunStarts
from services.orchestrator.runs.stream import EventCodec
from services.orchestrator.store import RunStore, SessionRecord
from services.orchestrator.store.journal import read_events

if TYPE_CHECKING:
    from services.orchestrator.runs.resume import RunResumes

log = logging.getLogger(__name__)

# How often each replica looks for expired waits (with jitter: replicas that started together do not all
# claim at once). A wait ends this much after its expiry at most, plus the time to apply it.
EXPIRY_POLL_S = 1.0
_jitter = random.Random()  # its own: background timing leaves the process's global random state alone


class Expired(ServiceError):
    """An interrupt answered after its wait expired: OUT_OF_RANGE (the gateway answers 410)."""

    code = grpc.StatusCode.OUT_OF_RANGE


class RunInterrupts:
    def __init__(self, runs: RunStore, starts: RunStarts, codec: EventCodec, resumes: RunResumes) -> None:
        self.runs = runs
        self.starts = starts
        self.codec = codec
        self.resumes = resumes
        self._loop: asyncio.Task | None = None

    # ------------------------------------------------------------------ expired waits
    def start(self) -> None:
        self._loop = asyncio.create_task(self._expiries(), name="interrupt-expiries")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)

    async def _expiries(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_POLL_S * _jitter.uniform(0.5, 1.0))
            try:
                await self.expire()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("interrupt expiry pass failed", exc_info=True)

    async def expire(self) -> None:
        """Apply `on_timeout` to every paused run whose wait expired that this replica claims first."""
        for tenant, run_id in await self.runs.pauses_expired():
            if not await self.runs.claim_expired_pause(tenant, run_id):
                continue  # another replica's
            try:
                await self._time_out(tenant, run_id)
            except Exception:  # claimed again after the claim's retry delay
                log.warning("run %s: applying its interrupt's on_timeout failed", run_id, exc_info=True)

    async def _time_out(self, tenant: str, run_id: str) -> None:
        info = await self.runs.status(tenant, run_id)
        node, session_id = info.get("paused_node", ""), info.get("session_id", "")
        if info.get("status") != "waiting_for_user" or not node or info.get("resumed_by"):
            await self.runs.forget_pause(tenant, run_id)  # answered or cancelled meanwhile
            return
        if not await self.runs.mark_answered(tenant, run_id, "timeout") and info.get("answered") != "timeout":
            await self.runs.forget_pause(tenant, run_id)  # a resolve came first: its answer resumes the run
            return
        component = node.rsplit("/", 1)[-1]
        params = await self._params(info, component)
        waited = f"waited {float(params.get('timeout_s') or 0):g} s for the user's input to {component}"
        on_timeout = params.get("on_timeout", "fail")
        log.info("run %s: %s; on_timeout %s", run_id, waited, on_timeout)
        if on_timeout == "cancel":
            await self.runs.end_pause(tenant, run_id, session_id, status="cancelled", error=f"cancelled: {waited}")
            return
        if on_timeout == "defaults":
            answer = default_answer(params)
            missing = missing_fields(params, answer)
            record = await self.resumes.sessions.get(tenant, session_id, messages=False) if session_id else None
            if record is not None and record.paused_run == run_id and answer and not missing:
                parent = RunSpec.from_json(json.loads(info.get("spec") or "{}"))
                spec = RunSpec(tenant_id=tenant, run_id=uuid.uuid4().hex, agent_id=info.get("agent_id", ""),
                               session_id=session_id, user_id=parent.user_id, inputs=answer,
                               overrides=parent.overrides, custom_header=parent.custom_header,
                               completion_webhook=parent.completion_webhook, continue_on_disconnect=True)
                (await self.resumes.answer_pause(spec, record)).detach()
                return
            if missing or not answer:
                waited += f"; its defaults leave {', '.join(missing) or 'its form'} empty"
        await self.runs.end_pause(tenant, run_id, session_id, status="failed", error=waited)

    async def list(self, tenant: str, run_id: str, agent_id: str = "") -> list[dict[str, Any]]:
        """The run's interrupt (none unless it paused at a UserFillUp), with its status: waiting, answered,
        expired or cancelled."""
        info = await self.runs.status(tenant, run_id)
        if not info or (agent_id and info.get("agent_id") != agent_id):
            raise NotFound(f"run {run_id!r} not found" + (f" for agent {agent_id!r}" if agent_id else ""))
        node = info.get("paused_node", "")
        if not node:
            return []
        component = node.rsplit("/", 1)[-1]
        params = await self._params(info, component)
        form, tips = {}, ""
        for _, fields in await read_events(self.runs.redis, tenant, run_id, 0, count=100_000):
            event = self.codec.decode(fields[b"e"])
            if event.__class__ is ev.UserInputRequired:
                form, tips = event.inputs, event.tips
        expires_at = _expires_at(info, params)
        if info.get("answered") == "timeout":  # and its on_timeout applied, or being applied
            status = "expired"
        elif info.get("answered") or info.get("resumed_by"):
            status = "answered"
        elif info.get("status") != "waiting_for_user":
            status = "cancelled"
        elif expires_at and time.time() >= expires_at:
            status = "expired"
        else:
            status = "waiting"
        return [{"id": f"{run_id}:{component}", "run_id": run_id, "component": component, "form": form,
                 "tips": tips, "expires_at": expires_at, "status": status,
                 "on_timeout": params.get("on_timeout", "fail")}]

    async def claim(self, spec: RunSpec, record: SessionRecord | None) -> None:
        """Before `answer_pause`: the interrupt `spec.interrupt_id` is this session's, still unanswered and not
        expired, and the answer fills its form; then it is marked answered, atomically (a second claim fails)."""
        run_id, _, component = spec.interrupt_id.partition(":")
        tenant = spec.tenant_id
        info = await self.runs.status(tenant, run_id)
        if not info or (spec.agent_id and info.get("agent_id") != spec.agent_id):
            raise NotFound(f"interrupt {spec.interrupt_id!r} not found")
        if info.get("paused_node", "").rsplit("/", 1)[-1] != component:
            raise NotFound(f"interrupt {spec.interrupt_id!r} not found")
        if info.get("answered") == "timeout":  # its on_timeout applied (or being applied)
            raise Expired(f"interrupt {spec.interrupt_id!r} expired")
        if info.get("answered") or info.get("resumed_by"):
            raise Aborted(f"interrupt {spec.interrupt_id!r} was answered already")
        if info.get("status") != "waiting_for_user" or record is None or record.paused_run != run_id:
            raise Aborted(f"interrupt {spec.interrupt_id!r} no longer waits (its run is {info.get('status')})")
        params = await self._params(info, component)
        expires_at = _expires_at(info, params)
        if expires_at and time.time() >= expires_at:
            raise Expired(f"interrupt {spec.interrupt_id!r} expired")
        if not spec.inputs:
            raise InvalidArgument(f"{component}: send the answers as `inputs`")
        missing = missing_fields(params, spec.inputs)
        if missing:
            raise InvalidArgument(f"{component}: inputs {', '.join(missing)} required to continue")
        if not await self.runs.mark_answered(tenant, run_id, spec.run_id or "1"):
            raise Aborted(f"interrupt {spec.interrupt_id!r} was answered already")

    async def _params(self, info: dict[str, str], component: str) -> dict[str, Any]:
        spec = RunSpec.from_json(json.loads(info.get("spec") or "{}"))
        plan = await self.starts.plan(spec, None)
        return plan.component_params(component)


def _expires_at(info: dict[str, str], params: dict[str, Any]) -> float:
    """When a pause's wait ends: its UserFillUp's `timeout_s` after the run paused (0: never)."""
    timeout = float(params.get("timeout_s") or 0)
    return float(info.get("finished_at") or 0) + timeout if timeout else 0.0
