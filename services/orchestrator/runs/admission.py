"""Where a request is admitted as a run, before anything is written: what it must carry and what it may ask.

A request that is refused here leaves nothing behind (no session claimed, no run recorded). One run at a time
per session is enforced later, atomically with the run's start (store/runs.py `RunStore.start`).
"""

from __future__ import annotations

from services.common.errors import InvalidArgument
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.store import SessionRecord


def check_request(spec: RunSpec) -> None:
    """Refuse a request that cannot become a run, naming what is wrong."""
    if not spec.tenant_id:
        raise InvalidArgument("tenant_id is required")


def check_session(spec: RunSpec, session: SessionRecord | None) -> None:
    """Refuse a request that continues a session it may not (`session`: the one it names, as read)."""
    if session is not None and spec.agent_id and session.agent_id != spec.agent_id:
        raise InvalidArgument(f"session {spec.session_id!r} belongs to another agent")
