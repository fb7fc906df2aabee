"""RunEvent -> the standard envelope: `{type, node_name, run_id, timestamp, thread_id, data}`.

Types and their `data`:
- `thread_id` (first): {"thread_id"}: the session to pass back as `thread_id` to continue;
- `content`: {"delta"} text deltas; `<think>` / `</think>` mark a reasoning block inline;
- `tool_start`: {"tool_name", "tool_input", "call_id"}; `tool_end`: {"tool_name", "tool_output", "call_id",
  "error", "elapsed_time"} (full values, not deltas);
- `status`: node progress and run milestones, {"status": "run_started" | "node_started" | "node_restarted"
  | "node_finished" | "node_failed" | "node_skipped" | "message_end" | "user_input_required", ...details}
  (`node_restarted`: the component runs again from its start after another replica took the run over; what
  it sent before is void);
- `error`: {"message", "code", "component_id"} (the failing component, or null; also its `node_name`); an
  admission refusal adds {"tenant", "limit", "retry_after", "retry_after_ms"};
  `done` (last, always): {"outputs", "usage", "elapsed_time", "cancelled", "waiting_for_user"} (waiting: the
  next request on the thread answers the form of the last `user_input_required` with `inputs`).
`node_name` is the component id, or "system" for run-level events; `timestamp` is epoch milliseconds;
`thread_id` is the session id. Lines are `data: {json}` with a space; `done` ends the stream.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from trellis.canvas.v1 import events_pb2

from gateway.dialects._common import delta_text, epoch_s, loads, run_failed, sse_frame, unexpected
from gateway.dialects.base import Dialect, DialectRun
from gateway.dialects.ragflow import usage_dict
from gateway.errors import GatewayError
from gateway.responses import EnvelopeEvent

SYSTEM = "system"


frame = sse_frame


class EnvelopeDialect(Dialect):
    """The standard envelope: the HTTP status of gateway/errors.py and one envelope of type `error`; its run
    route always streams."""

    name = "envelope"
    error_model = EnvelopeEvent
    json_answers = False

    def error_body(self, err: GatewayError) -> dict[str, Any]:
        return {"type": "error", "node_name": SYSTEM, "run_id": "", "timestamp": int(time.time() * 1000),
                "thread_id": "", "data": error_data(err)}


def error_data(err: GatewayError) -> dict[str, Any]:
    """The `data` of an `error` envelope: message and code; an admission refusal adds whose, which limit and
    when to retry (`tenant`, `limit`, `retry_after` in seconds, `retry_after_ms`)."""
    data: dict[str, Any] = {"message": err.message, "code": err.code.name}
    if err.refusal is not None:
        data.update(err.refusal.fields())
    return data


ENVELOPE = EnvelopeDialect()


class EnvelopeRun(DialectRun):
    dialect = ENVELOPE

    def __init__(self, thread_id: str = "") -> None:
        self.thread_id = thread_id
        self.run_id = ""
        self._last_ms = 0
        self.failed_component = ""  # the component a RunError named, for the `error` envelope

    def envelope(self, type_: str, data: dict[str, Any], *, node_name: str = SYSTEM,
                 ev: events_pb2.RunEvent | None = None) -> dict[str, Any]:
        if ev is not None:
            self._last_ms = int(epoch_s(ev) * 1000)
        return {"type": type_, "node_name": node_name or SYSTEM, "run_id": self.run_id,
                "timestamp": self._last_ms or int(time.time() * 1000),
                "thread_id": self.thread_id, "data": data}

    def convert(self, ev: events_pb2.RunEvent) -> list[dict[str, Any]]:
        """The envelopes for `ev`. RunError raises (the stream turns it into `error` + `done`)."""
        if ev.session_id:
            self.thread_id = ev.session_id
        if ev.run_id:
            self.run_id = ev.run_id
        kind = ev.WhichOneof("kind")
        node = ev.node_id or SYSTEM
        if kind == "error":
            self.failed_component = ev.error.component_id
            raise run_failed(ev.error)
        if kind == "run_started":
            inputs = loads(ev.run_started.inputs_json, {})
            return [self.envelope("status", {"status": "run_started", "inputs": inputs}, ev=ev)]
        if kind == "node_started":
            n = ev.node_started
            # node_restarted: it runs again from its start after a take-over; drop what it sent so far
            data = {"status": "node_restarted" if n.restarted else "node_started",
                    "component_name": n.component_name or ev.node_id,
                    "component_type": n.component_type, "path": list(ev.path)}
            return [self.envelope("status", data, node_name=node, ev=ev)]
        if kind == "node_finished":
            n = ev.node_finished
            status = "node_skipped" if n.skipped else "node_failed" if n.error else "node_finished"
            return [self.envelope("status", {"status": status, "component_name": n.component_name or ev.node_id,
                                             "component_type": n.component_type, "elapsed_time": n.elapsed_s,
                                             "error": n.error or None, "path": list(ev.path)}, node_name=node, ev=ev)]
        if kind == "message_delta":
            m = ev.message_delta
            text = delta_text(m)
            return [self.envelope("content", {"delta": text}, node_name=node, ev=ev)] if text else []
        if kind == "message_end":
            m = ev.message_end
            return [self.envelope("status", {"status": "message_end", "reference": loads(m.reference_json, {}),
                                             "attachment": loads(m.attachment_json, None),
                                             "downloads": loads(m.downloads_json, [])}, node_name=node, ev=ev)]
        if kind == "tool_call_started":
            t = ev.tool_call_started
            return [self.envelope("tool_start", {"tool_name": t.tool_name, "tool_input": loads(t.arguments_json, {}),
                                                 "call_id": t.call_id}, node_name=node, ev=ev)]
        if kind == "tool_call_finished":
            t = ev.tool_call_finished
            return [self.envelope("tool_end", {"tool_name": t.tool_name, "tool_output": loads(t.result, ""),
                                               "call_id": t.call_id, "error": t.error or None,
                                               "elapsed_time": t.elapsed_s}, node_name=node, ev=ev)]
        if kind == "user_input_required":
            u = ev.user_input_required
            return [self.envelope("status", {"status": "user_input_required", "inputs": loads(u.inputs_json, {}),
                                             "tips": u.tips}, node_name=node, ev=ev)]
        if kind == "run_finished":
            r = ev.run_finished
            out = []
            if r.error and not r.cancelled:
                out.append(self.envelope("error", {"message": r.error, "code": "run_failed"}, ev=ev))
            out.append(self.envelope("done", {"outputs": loads(r.outputs_json, {}), "usage": usage_dict(r.usage),
                                              "elapsed_time": r.elapsed_s, "cancelled": r.cancelled,
                                              "waiting_for_user": r.waiting_for_user}, ev=ev))
            return out
        return []

    async def stream(self, events: AsyncIterator[events_pb2.RunEvent]) -> AsyncIterator[bytes]:
        """`thread_id` first, then every envelope; a failure is `error` then `done`; `done` is always last."""
        first = True
        done = False
        try:
            async for ev in events:
                if first:
                    first = False
                    if ev.session_id:
                        self.thread_id = ev.session_id
                    self.run_id = ev.run_id
                    yield frame(self.envelope("thread_id", {"thread_id": self.thread_id}, ev=ev))
                for env in self.convert(ev):
                    done = done or env["type"] == "done"
                    yield frame(env)
        except Exception as exc:  # noqa: BLE001 (GatewayError, or a bug: either ends the stream cleanly)
            # (No local keeps the exception past this block: its traceback holds this frame, a cycle.)
            yield frame(self.envelope("error", {
                **error_data(exc if isinstance(exc, GatewayError) else unexpected(exc)),
                "component_id": self.failed_component or None}, node_name=self.failed_component))
        if not done:
            yield frame(self.envelope("done", {"outputs": {}, "usage": None, "elapsed_time": None, "cancelled": False}))
