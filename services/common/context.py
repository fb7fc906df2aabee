"""Per-request context that follows a call across awaits and service hops."""

from __future__ import annotations

import uuid
from contextvars import ContextVar

REQUEST_ID_HEADER = "x-request-id"

request_id: ContextVar[str] = ContextVar("request_id", default="")
run_id: ContextVar[str] = ContextVar("run_id", default="")
node_id: ContextVar[str] = ContextVar("node_id", default="")


def new_request_id() -> str:
    return uuid.uuid4().hex
