"""RunEvent -> RAGFlow agent events (reference/ragflow.md 4.2, 5.2), for streams and for non-stream answers.

Which events a client sees depends on how RAGFlow would have run the request (`Mode`):

- WORKFLOW: no session_id, or a session created by a run ("workflow" source): every event.
- SESSION: a session created by POST .../sessions ("agent" source): node_finished, message, message_end,
  user_inputs, and workflow_finished reduced to its usage; workflow_started and node_started are dropped,
  except a node_started with `data.restarted` true (the component runs again after another replica took the
  run over: a client drops the output it showed of that component).
- LEGACY: POST /api/v1/agents/{id}/completions: message and message_end only, plus node_finished when
  return_trace is set. SDK 0.22 reads `data.content` of every event it gets, so nothing else may reach it.

Tool-call events have no RAGFlow counterpart (RAGFlow logs them, it does not stream them) and are dropped;
so are nodes pruned by a branch, which RAGFlow never runs. `created_at` of node_finished and
workflow_finished is epoch seconds as a float where RAGFlow puts a perf_counter value (meaningless to a
client); every other `created_at` is int epoch seconds, as RAGFlow's.
"""

from __future__ import annotations

import copy
import enum
import json
from typing import Any, AsyncIterator

import grpc
import orjson
from aiohttp import web
from trellis.canvas.v1 import events_pb2

from gateway.contract import Contract
from gateway.dialects._common import epoch_s, loads, run_failed, unexpected
from gateway.dialects.base import Dialect, DialectRun
from gateway.errors import GatewayError
from gateway.responses import RagflowError, json_response

DONE = b"data:[DONE]\n\n"


def frame(obj: dict[str, Any]) -> bytes:
    """RAGFlow's SSE line: `data:` with no space, json.dumps' default separators, a blank line."""
    return b"data:" + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


# The RetCode of an admission refusal. RAGFlow has no code for overload (its RetCode enum stops at CONFLICT); the
# one limit it enforces, a webhook's rate limit (agent_api.py, its token bucket), answers RetCode.BAD_REQUEST,
# 400, with the message. A RAGFlow client tells success from failure by `code == 0` and reads `message`; one
# that maps the code to RetCode would fail on a value outside it (429). So 400, RAGFlow's own answer to a rate
# limit; the HTTP status (429) and Retry-After say that it is worth retrying, and when.
REFUSED = 400


def error_object(message: str, code: int = 500) -> dict[str, Any]:
    """A failure inside a stream (RAGFlow's own: code 500 whatever went wrong; a refusal: REFUSED)."""
    return {"code": code, "message": message, "data": False}


def ok(data: Any = True, **extra: Any) -> web.Response:
    """RAGFlow's success envelope; `extra` adds top-level keys such as `total`."""
    return json_response({"code": 0, "message": "success", "data": data, **extra})


class RagflowDialect(Dialect):
    """RAGFlow's API: HTTP 200 and `{"code": 0, "message", "data"}`; an error is `{"code": <RetCode>,
    "message", "data": false}`, with HTTP 200 too except 401 for authentication (gateway/errors.py) and 429
    for an admission refusal (code REFUSED, with Retry-After)."""

    name = "ragflow"
    error_model = RagflowError

    def error_body(self, err: GatewayError) -> dict[str, Any]:
        if err.refusal is not None:
            return {"code": REFUSED, "message": err.message, "data": False}
        # RAGFlow's 401 comes from its error handler (data null); its other errors carry data false.
        return {"code": err.ragflow_code, "message": err.message, "data": None if err.ragflow_code == 401 else False}

    def error_status(self, err: GatewayError) -> int:
        if err.refusal is not None:  # an admission refusal: 429 with Retry-After at every door, as the issue asks
            return 429
        # a double-text refused (multitask_strategy reject): 409, as the issue asks, whatever the dialect
        if err.code == grpc.StatusCode.ABORTED:
            return 409
        if err.http_status == 410:  # an interrupt answered after it expired (gateway/routes/runs.py)
            return 410
        return 401 if err.ragflow_code == 401 else 200

    def auth_error(self, missing: bool) -> GatewayError:
        # RAGFlow's login_required: HTTP 401 and code 401 with the repr of its Unauthorized exception, for a
        # missing key and a wrong one alike.
        return GatewayError(UNAUTHORIZED, code=grpc.StatusCode.UNAUTHENTICATED, ragflow_code=401)

    def openapi_responses(self, contract: Contract | None, answer: dict[str, Any] | None,
                          error: dict[str, Any]) -> dict[str, Any]:
        ok_schema = {"type": "object", "required": ["code"],
                     "properties": {"code": {"const": 0}, "message": {"type": "string"}, "data": answer or {}}}
        json_schema = error if contract is not None and contract.binary else {"anyOf": [ok_schema, error]}
        content: dict[str, Any] = {"application/json": {"schema": json_schema}}
        content.update(self.openapi_extra_content(contract))
        error_content = {"application/json": {"schema": error}}
        answers: dict[str, Any] = {
            "200": {"description": "RAGFlow's envelope: code 0 and data, or an error code and message", "content": content},
            "401": {"description": "missing or wrong API key", "content": error_content}}
        for status in contract.error_statuses if contract is not None else ():
            answers[str(status)] = {"description": "an error", "content": error_content}
        if answer is None and (contract is None or not contract.binary):
            # a route that declares no answer: documented loosely, as what it may be
            content["*/*"] = {}
            answers["default"] = {"description": "an error", "content": error_content}
        return answers


RAGFLOW = RagflowDialect()
UNAUTHORIZED = "<Unauthorized '401: Unauthorized'>"


class Mode(enum.Enum):
    WORKFLOW = "workflow"
    SESSION = "session"
    LEGACY = "legacy"


_SESSION_EVENTS = {"node_finished", "message", "message_end", "user_inputs", "workflow_finished"}
_LEGACY_EVENTS = {"message", "message_end"}


class RagflowRun(DialectRun):
    dialect = RAGFLOW

    def __init__(self, mode: Mode, *, return_trace: bool = False, session_id: str = "") -> None:
        self.mode = mode
        self.return_trace = return_trace
        self.session_id = session_id
        self._inputs: Any = {}
        self._trace: list[dict[str, Any]] = []
        # non-stream aggregation
        self._content: list[str] = []
        self._reference: dict[str, Any] = {}
        self._structured: dict[str, Any] = {}
        self._last: dict[str, Any] | None = None
        self._last_answer: dict[str, Any] | None = None
        self._usage: dict[str, Any] | None = None
        self._message_key: tuple[str, str] = ("", "")
        self._message_parts: tuple[bytes, bytes, bytes] = (b"", b"", b"")

    # ---- one event ------------------------------------------------------------------------------------

    def convert(self, ev: events_pb2.RunEvent) -> dict[str, Any] | None:
        """The RAGFlow event for `ev`, unfiltered; None when RAGFlow has none. RunError raises."""
        kind = ev.WhichOneof("kind")
        if ev.session_id:
            self.session_id = ev.session_id
        if kind == "error":
            raise run_failed(ev.error)
        data = self._data(kind, ev)
        if data is None:
            return None
        name = _EVENT_NAMES[kind]
        return {"event": name, "message_id": ev.run_id, "created_at": int(epoch_s(ev)), "task_id": self.session_id,
                "data": data, "session_id": self.session_id}

    def _data(self, kind: str | None, ev: events_pb2.RunEvent) -> dict[str, Any] | None:
        if kind == "run_started":
            self._inputs = loads(ev.run_started.inputs_json, {})
            return {"inputs": self._inputs}
        if kind == "node_started":
            n = ev.node_started
            data = {"inputs": None, "created_at": int(epoch_s(ev)), "component_id": ev.node_id,
                    "component_name": n.component_name or ev.node_id, "component_type": n.component_type,
                    "thoughts": n.thoughts}
            if n.restarted:  # runs again after a take-over: drop what it sent so far (docs/durability.md)
                data["restarted"] = True
            return data
        if kind == "node_finished":
            n = ev.node_finished
            if n.skipped:
                return None
            return {"inputs": loads(n.inputs_json, {}), "outputs": loads(n.outputs_json, {}),
                    "component_id": ev.node_id, "component_name": n.component_name or ev.node_id,
                    "component_type": n.component_type, "error": n.error or None, "elapsed_time": n.elapsed_s,
                    "created_at": epoch_s(ev)}
        if kind == "message_delta":
            m = ev.message_delta
            if m.start_to_think:
                return {"content": "", "start_to_think": True}
            if m.end_to_think:
                return {"content": "", "end_to_think": True}
            return {"content": m.content}
        if kind == "message_end":
            m = ev.message_end
            data: dict[str, Any] = {}
            if m.status:
                data["status"] = m.status
            if m.attachment_json:
                data["attachment"] = loads(m.attachment_json, {})
            if m.downloads_json:
                data["downloads"] = loads(m.downloads_json, [])
            if m.reference_json:
                data["reference"] = loads(m.reference_json, {})
            return data
        if kind == "user_input_required":
            u = ev.user_input_required
            return {"inputs": loads(u.inputs_json, {}), "tips": u.tips}
        if kind == "run_finished":
            r = ev.run_finished
            outputs = "Task has been canceled" if r.cancelled else loads(r.outputs_json, {})
            return {"inputs": self._inputs, "outputs": outputs, "elapsed_time": r.elapsed_s,
                    "created_at": epoch_s(ev), "usage": usage_dict(r.usage)}
        return None  # tool calls

    def forward(self, ev: events_pb2.RunEvent) -> dict[str, Any] | None:
        """The event a stream in this mode sends for `ev`, or None."""
        out = self.convert(ev)
        if out is None:
            return None
        name = out["event"]
        if name == "node_finished":
            if self.return_trace:
                self._trace.append({"component_id": out["data"]["component_id"], "trace": [copy.deepcopy(out["data"])]})
                out["data"]["trace"] = list(self._trace)
            elif self.mode is Mode.LEGACY:
                return None
        if self.mode is Mode.SESSION:
            if name not in _SESSION_EVENTS and not out["data"].get("restarted"):
                return None
            if name == "workflow_finished":
                out["data"] = {"usage": out["data"]["usage"]}
        elif self.mode is Mode.LEGACY and name not in _LEGACY_EVENTS and name != "node_finished":
            return None
        return out

    def message_frame(self, ev: events_pb2.RunEvent) -> bytes:
        """`frame(self.forward(ev))` for a message delta (sent in every mode), built without a dict: the one
        event per token. Same bytes as the general path; string fields go through orjson, whose output for a
        str equals json.dumps(..., ensure_ascii=False)."""
        if ev.session_id:
            self.session_id = ev.session_id
        m = ev.message_delta
        if m.start_to_think:
            data = b'{"content": "", "start_to_think": true}'
        elif m.end_to_think:
            data = b'{"content": "", "end_to_think": true}'
        else:
            data = b'{"content": ' + orjson.dumps(m.content) + b"}"
        if self._message_key != (ev.run_id, self.session_id):
            self._message_key = (ev.run_id, self.session_id)
            sid = orjson.dumps(self.session_id)
            self._message_parts = (b'data:{"event": "message", "message_id": ' + orjson.dumps(ev.run_id)
                                   + b', "created_at": ', b', "task_id": ' + sid + b', "data": ',
                                   b', "session_id": ' + sid + b"}\n\n")
        head, middle, tail = self._message_parts
        return head + str(int(epoch_s(ev))).encode() + middle + data + tail

    # ---- non-stream ------------------------------------------------------------------------------------

    def feed(self, ev: events_pb2.RunEvent) -> None:
        out = self.convert(ev)
        if out is None:
            return
        name, data = out["event"], out["data"]
        if name == "message":
            self._content.append(data.get("content", ""))
        if isinstance(data.get("reference"), dict) and data["reference"]:
            self._reference.update(data["reference"])
        if name == "node_finished":
            outputs = data.get("outputs")
            if isinstance(outputs, dict) and "structured" in outputs:
                self._structured[data["component_id"]] = outputs["structured"]
            if self.return_trace:
                self._trace.append({"component_id": data["component_id"], "trace": [copy.deepcopy(data)]})
        if name == "workflow_finished":
            self._usage = data.get("usage")
        if name in ("message_end", "user_inputs"):
            self._last_answer = out
        self._last = out

    def result(self) -> dict[str, Any]:
        """The `data` of the non-stream answer: the final event with content, reference, structured, trace.

        WORKFLOW: the last event (normally workflow_finished). SESSION and LEGACY: the last message_end or
        user_inputs, with the run's usage. The RAGFlow SDK reads `data.data.content`.
        """
        final = self._last if self.mode is Mode.WORKFLOW else (self._last_answer or self._last)
        if final is None:
            return {}
        final = dict(final)
        data = dict(final["data"]) if isinstance(final.get("data"), dict) else {}
        data["content"] = "".join(self._content)
        data["reference"] = self._reference
        if self.mode is not Mode.WORKFLOW and self._usage is not None:
            data.setdefault("usage", self._usage)
        if self._structured:
            data["structured"] = self._structured
        if self.return_trace:
            data["trace"] = self._trace
        final["data"] = data
        return final

    # ---- the interface -------------------------------------------------------------------------------

    async def stream(self, events: AsyncIterator[events_pb2.RunEvent]) -> AsyncIterator[bytes]:
        """The byte stream: one frame per forwarded event, the error object on failure, always `[DONE]`."""
        wrote = False
        try:
            async for ev in events:
                if ev.HasField("message_delta"):
                    wrote = True
                    yield self.message_frame(ev)
                    continue
                out = self.forward(ev)
                if out is not None:
                    wrote = True
                    yield frame(out)
            if not wrote:
                yield frame({"session_id": self.session_id, "data": {}})
        except GatewayError as err:
            yield frame(error_object(err.message, REFUSED if err.refusal is not None else 500))
        except Exception as exc:  # noqa: BLE001 (the stream must still end with the error and [DONE])
            yield frame(error_object(unexpected(exc).message))
        yield DONE

    async def answer(self, events: AsyncIterator[events_pb2.RunEvent]) -> web.Response:
        async for ev in events:
            self.feed(ev)
        return ok(self.result())


_EVENT_NAMES = {
    "run_started": "workflow_started",
    "node_started": "node_started",
    "node_finished": "node_finished",
    "message_delta": "message",
    "message_end": "message_end",
    "user_input_required": "user_inputs",
    "run_finished": "workflow_finished",
}


def usage_dict(u: events_pb2.Usage) -> dict[str, int]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens, "calls": u.calls}
