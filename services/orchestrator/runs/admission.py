"""Where a request is admitted as a run, before anything is written: what it must carry, what it may ask, and
whether its tenant is within its limits (services/orchestrator/limits/, docs/limits.md).

A request that is refused here leaves nothing behind (no session claimed, no run recorded). One run at a time
per session is enforced later, atomically with the run's start (store/runs.py `RunStore.start`).
"""

from __future__ import annotations

from services.common.errors import InvalidArgument
from services.orchestrator.engine.plan import Plan
from services.orchestrator.limits.gate import RunTicket, StreamTicket, TenantGate
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.store import SessionRecord


# What a request on a busy session may ask (double-texting; runs/starts.py `make_way` applies it): refuse it
# (ABORTED), start once the current run ends, cancel the current run first (its turn stays, or goes). A session
# paused at a UserFillUp is not busy; there a new message under interrupt or rollback cancels the paused run
# first (runs/starts.py `supersede_pause`), and under the others answers the pause.
MULTITASK_STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")


def multitask_strategy(spec: RunSpec, plan: Plan) -> str:
    """The request's strategy, else its agent's (Begin's `multitask_strategy` param), else "" (refused as
    busy, FAILED_PRECONDITION, as before strategies existed)."""
    if spec.multitask_strategy:
        return spec.multitask_strategy
    begin = plan.canvas.components.get("begin")
    default = begin.params.get("multitask_strategy", "") if begin is not None else ""
    return default if default in MULTITASK_STRATEGIES else ""


def check_request(spec: RunSpec) -> None:
    """Refuse a request that cannot become a run, naming what is wrong."""
    if not spec.tenant_id:
        raise InvalidArgument("tenant_id is required")
    if spec.multitask_strategy and spec.multitask_strategy not in MULTITASK_STRATEGIES:
        raise InvalidArgument(f"multitask_strategy must be one of {', '.join(MULTITASK_STRATEGIES)}")


def check_session(spec: RunSpec, session: SessionRecord | None) -> None:
    """Refuse a request that continues a session it may not (`session`: the one it names, as read)."""
    if session is not None and spec.agent_id and session.agent_id != spec.agent_id:
        raise InvalidArgument(f"session {spec.session_id!r} belongs to another agent")


async def admit(limits: TenantGate, spec: RunSpec) -> RunTicket:
    """The run within its tenant's limits, or LimitExceeded / Overloaded (RESOURCE_EXHAUSTED, with when to retry).
    A child run (an AgentCall's) is part of its caller's work, admitted already: never refused here, its LLM
    tokens counted all the same."""
    if spec.caller_run_id:
        return limits.admit_exempt(spec.tenant_id, spec.run_id, api_key_id=spec.api_key_id, agent_id=spec.agent_id)
    return await limits.admit_run(spec.tenant_id, spec.run_id, api_key_id=spec.api_key_id, agent_id=spec.agent_id)


async def hold_stream(limits: TenantGate, spec: RunSpec) -> StreamTicket | None:
    """The caller's stream within its tenant's held streams (a child run's stream is its caller's: None)."""
    if spec.caller_run_id:
        return None
    return await limits.hold_stream(spec.tenant_id, api_key_id=spec.api_key_id, agent_id=spec.agent_id)
