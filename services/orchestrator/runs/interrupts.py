"""Interrupts: what a paused run waits for (its UserFillUp's form and tips, and when the wait expires), and
answering one, once.

An interrupt's id is "<run id>:<component>". Answering it is what a completion with `inputs` on the session
does (runs/resume.py `answer_pause`), after `claim`: an atomic 'answered' mark on the paused run, so a second
answer is refused (ABORTED) whatever replica it reaches; a wait past its UserFillUp's `timeout_s` (counted
from the pause) is refused too (OUT_OF_RANGE).
"""

from __future__ import annotations

import json
import time
from typing import Any

import grpc

from services.common.errors import InvalidArgument, NotFound, ServiceError
from services.orchestrator.components.user_fill_up import missing_fields
from services.orchestrator.engine import events as ev
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.runs.starts import Aborted, RunStarts
from services.orchestrator.runs.stream import EventCodec
from services.orchestrator.store import RunStore, SessionRecord
from services.orchestrator.store import keys
from services.orchestrator.store.journal import read_events


class Expired(ServiceError):
    """An interrupt answered after its wait expired: OUT_OF_RANGE (the gateway answers 410)."""

    code = grpc.StatusCode.OUT_OF_RANGE


class RunInterrupts:
    def __init__(self, runs: RunStore, starts: RunStarts, codec: EventCodec) -> None:
        self.runs = runs
        self.starts = starts
        self.codec = codec

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
        if info.get("answered") or info.get("resumed_by"):
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
        if not await self.runs.redis.hsetnx(keys.run(tenant, run_id), "answered", spec.run_id or "1"):
            raise Aborted(f"interrupt {spec.interrupt_id!r} was answered already")

    async def _params(self, info: dict[str, str], component: str) -> dict[str, Any]:
        spec = RunSpec.from_json(json.loads(info.get("spec") or "{}"))
        plan = await self.starts.plan(spec, None)
        return plan.component_params(component)


def _expires_at(info: dict[str, str], params: dict[str, Any]) -> float:
    """When a pause's wait ends: its UserFillUp's `timeout_s` after the run paused (0: never)."""
    timeout = float(params.get("timeout_s") or 0)
    return float(info.get("finished_at") or 0) + timeout if timeout else 0.0
