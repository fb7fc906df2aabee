"""Small helpers every dialect shares: timestamps, JSON fields, and the run-level failure."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import grpc
from trellis.canvas.v1 import events_pb2

from gateway.errors import GatewayError
from services.common.json_fields import dump_bytes

log = logging.getLogger(__name__)

# RunError.code -> the status its non-stream response gets
_RUN_ERROR_CODES = {
    "invalid_input": grpc.StatusCode.INVALID_ARGUMENT,
    "timeout": grpc.StatusCode.DEADLINE_EXCEEDED,
    "cancelled": grpc.StatusCode.CANCELLED,
    "not_found": grpc.StatusCode.NOT_FOUND,
}


def run_failed(error: events_pb2.RunError) -> GatewayError:
    """A RunError event, as the error the route reports (in-band in a stream, as the response otherwise)."""
    where = f" (component {error.component_id})" if error.component_id else ""
    code = _RUN_ERROR_CODES.get(error.code, grpc.StatusCode.INTERNAL)
    return GatewayError(f"{error.message or 'the run failed'}{where}", code=code)


def epoch_s(event: events_pb2.RunEvent) -> float:
    """The event's time in epoch seconds; now when the orchestrator left it unset."""
    ts = event.timestamp
    if ts.seconds == 0 and ts.nanos == 0:
        return time.time()
    return ts.seconds + ts.nanos / 1e9


def sse_frame(obj: dict[str, Any]) -> bytes:
    """An SSE event as OpenAI and the standard envelope write it: `data: ` with a space, then a blank line.
    (RAGFlow's own dialect has no space: see ragflow.frame.)"""
    return b"data: " + dump_bytes(obj) + b"\n\n"


def delta_text(m: events_pb2.MessageDelta) -> str:
    """A message delta as inline text: reasoning blocks are marked with <think> / </think>."""
    return "<think>" if m.start_to_think else "</think>" if m.end_to_think else m.content


def loads(text: str, default: Any) -> Any:
    """A `*_json` field: `default` when empty; the raw text when it is not JSON (never a crash mid-stream)."""
    if not text:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def ts_ms(ts: Any) -> int:
    """google.protobuf.Timestamp -> epoch milliseconds (RAGFlow's create_time / update_time)."""
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def unexpected(exc: Exception) -> GatewayError:
    """A bug while rendering a stream: logged with its trace here, reported in-band without it."""
    log.error("error while rendering a run stream", exc_info=exc)
    return GatewayError("internal error in the gateway; see its log", code=grpc.StatusCode.INTERNAL)
