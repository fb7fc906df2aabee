"""Per-request context that follows a call across awaits and service hops."""

from __future__ import annotations

import uuid
from contextvars import ContextVar
from typing import Callable

REQUEST_ID_HEADER = "x-request-id"

request_id: ContextVar[str] = ContextVar("request_id", default="")
run_id: ContextVar[str] = ContextVar("run_id", default="")
node_id: ContextVar[str] = ContextVar("node_id", default="")
# Set by the orchestrator for a run's engine; called whenever a request to a peer has just been sent
# (services/clients/_rpc.py). The run's start is written then, behind the model call rather than ahead of it.
on_peer_call: ContextVar[Callable[[], None] | None] = ContextVar("on_peer_call", default=None)


def peer_call_sent() -> None:
    hook = on_peer_call.get()
    if hook is not None:
        hook()


def new_request_id() -> str:
    return uuid.uuid4().hex
