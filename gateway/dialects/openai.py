"""RunEvent -> OpenAI chat completions (chunks and the non-stream object).

As OpenAI sends them: a role chunk first, content deltas, `finish_reason: "stop"` on the last choice
chunk, then a usage chunk (empty `choices`) when `stream_options.include_usage` is set, then `[DONE]`.
As RAGFlow adds: `id` is the session id (send it back as `session_id` or `metadata.id` to continue the
conversation) and a message_end's `reference` rides in a delta with empty content.
`<think>` blocks arrive inline as `<think>` / `</think>` in the content; a UserFillUp's tips are content.
A mid-stream failure is one `{"error": {...}}` chunk, which the official client raises as APIError.
A component that starts again after another replica took the run over (NodeStarted `restarted`) has no place
in OpenAI's chunks and adds nothing to the content: a client that rejoined sees its whole output again
(gateway/README.md, "Rejoining a run").
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

import grpc
from aiohttp import web
from trellis.canvas.v1 import events_pb2

from gateway.dialects._common import delta_text, loads, run_failed, sse_frame, unexpected
from gateway.dialects.base import Dialect, DialectRun
from gateway.errors import GatewayError
from gateway.responses import OpenAIError, json_response

DONE = b"data: [DONE]\n\n"


frame = sse_frame


class OpenAIDialect(Dialect):
    """OpenAI's API: the HTTP status of gateway/errors.py and `{"error": {"message", "type", "param", "code"}}`."""

    name = "openai"
    error_model = OpenAIError

    def error_body(self, err: GatewayError) -> dict[str, Any]:
        code = err.openai_code
        if code is None and err.code == grpc.StatusCode.UNAUTHENTICATED:
            code = "invalid_api_key"
        if code is None and err.refusal is not None:
            # as OpenAI's own 429 (type rate_limit_error): its SDK retries a 429 after Retry-After
            code = "rate_limit_exceeded"
        return {"error": {"message": err.message, "type": err.openai_type, "param": err.param, "code": code}}


OPENAI = OpenAIDialect()


class OpenAIRun(DialectRun):
    dialect = OPENAI

    def __init__(self, *, model: str, completion_id: str, include_usage: bool = False) -> None:
        self.model = model
        self.id = completion_id
        self.created = int(time.time())
        self.include_usage = include_usage
        self._content: list[str] = []
        self._reference: dict[str, Any] = {}
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "system_fingerprint": "",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self.include_usage:
            chunk["usage"] = None  # OpenAI: null on every chunk but the usage chunk
        return chunk

    def role_chunk(self) -> dict[str, Any]:
        return self.chunk({"role": "assistant", "content": ""})

    def finish_chunk(self) -> dict[str, Any]:
        return self.chunk({}, "stop")

    def usage_chunk(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": "", "choices": [], "usage": self.usage}

    def delta(self, ev: events_pb2.RunEvent) -> dict[str, Any] | None:
        """The delta `ev` contributes (also accumulated for the non-stream answer); RunError raises."""
        kind = ev.WhichOneof("kind")
        if kind == "error":
            raise run_failed(ev.error)
        if kind == "message_delta":
            m = ev.message_delta
            text = delta_text(m)
            if not text:
                return None
            self._content.append(text)
            return {"content": text}
        if kind == "message_end":
            reference = loads(ev.message_end.reference_json, {})
            if not reference:
                return None
            if isinstance(reference, dict):
                self._reference.update(reference)
            return {"content": "", "reference": reference}
        if kind == "user_input_required" and ev.user_input_required.tips:
            self._content.append(ev.user_input_required.tips)
            return {"content": ev.user_input_required.tips}
        if kind == "run_finished":
            u = ev.run_finished.usage
            self.usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                          "total_tokens": u.total_tokens or u.prompt_tokens + u.completion_tokens}
        return None

    def completion(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "system_fingerprint": "",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "".join(self._content),
                                     "reference": self._reference}}],
            "usage": self.usage,
        }

    async def stream(self, events: AsyncIterator[events_pb2.RunEvent]) -> AsyncIterator[bytes]:
        role_due = True  # sent with the first event, which carries the id of a session the run created
        try:
            async for ev in events:
                if role_due:
                    role_due, self.id = False, self.id or ev.session_id
                    yield frame(self.role_chunk())
                delta = self.delta(ev)
                if delta is not None:
                    yield frame(self.chunk(delta))
        except Exception as exc:  # noqa: BLE001 (GatewayError, or a bug: either ends the stream cleanly)
            # (No local keeps the exception past this block: its traceback holds this frame, a cycle.)
            error = OPENAI.error_body(exc if isinstance(exc, GatewayError) else unexpected(exc))
            if role_due:
                yield frame(self.role_chunk())
            yield frame(error)
            yield DONE
            return
        if role_due:
            yield frame(self.role_chunk())
        yield frame(self.finish_chunk())
        if self.include_usage:
            yield frame(self.usage_chunk())
        yield DONE

    async def answer(self, events: AsyncIterator[events_pb2.RunEvent]) -> web.Response:
        async for ev in events:
            self.id = self.id or ev.session_id  # a session the run created: its id is the completion's
            self.delta(ev)
        return json_response(self.completion())
