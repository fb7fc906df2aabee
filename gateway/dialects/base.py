"""The one interface of a wire dialect: what every dialect implements (docs/adding-a-dialect.md).

A `Dialect` is how the gateway speaks to one kind of client outside a run: the body and HTTP status of an
error, the wording of a missing or wrong API key, and how the OpenAPI document describes its answers.
A `DialectRun` renders one run's `RunEvent`s in it: `stream` writes the frames (always ending with the
dialect's last frame, a failure reported in-band), `answer` the one response of a request that did not ask
to stream. Routes name their dialect with `@endpoint(dialect)` (gateway/endpoint.py) and hand a run to
`gateway.routes._runs.respond`; nothing else in the gateway knows which dialects exist.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, ClassVar

import grpc
from aiohttp import web
from pydantic import BaseModel
from trellis.canvas.v1 import events_pb2

from gateway.contract import Contract
from gateway.errors import GatewayError
from gateway.responses import json_response

SSE = "text/event-stream"


class Dialect(ABC):
    """One wire dialect. Subclasses set `name` and `error_model` and write `error_body`; the rest has defaults."""

    name: ClassVar[str]  # short and unique: "ragflow"
    error_model: ClassVar[type[BaseModel]]  # the schema of `error_body` in /openapi.json
    media_type: ClassVar[str] = SSE  # what `DialectRun.stream` writes
    stream_description: ClassVar[str] = "server-sent events, one JSON object per data line"
    json_answers: ClassVar[bool] = True  # False: its run routes only stream (no one-object answer)

    # The built-in dialects, for `@endpoint(Dialect.RAGFLOW)`; set by gateway/dialects/__init__.py.
    RAGFLOW: ClassVar[Dialect]
    OPENAI: ClassVar[Dialect]
    ENVELOPE: ClassVar[Dialect]

    @abstractmethod
    def error_body(self, err: GatewayError) -> dict[str, Any]:
        """The JSON body of an error answered before any stream started."""

    def error_status(self, err: GatewayError) -> int:
        return err.http_status

    def error_response(self, err: GatewayError) -> web.Response:
        """The error's answer; an admission refusal's carries Retry-After and the RateLimit headers."""
        response = json_response(self.error_body(err), status=self.error_status(err))
        if err.refusal is not None:
            response.headers.update(err.refusal.headers())
        return response

    def auth_error(self, missing: bool) -> GatewayError:
        """A request without an API key (`missing`) or with a wrong one; OpenAI's wording unless overridden."""
        code = grpc.StatusCode.UNAUTHENTICATED
        if missing:
            return GatewayError("You didn't provide an API key. Send it in an Authorization header using Bearer auth "
                                "(Authorization: Bearer YOUR_KEY).", code=code)
        return GatewayError("Incorrect API key provided.", code=code)

    def openapi_responses(self, contract: Contract | None, answer: dict[str, Any] | None,
                          error: dict[str, Any]) -> dict[str, Any]:
        """The `responses` of an operation in /openapi.json: `answer` is the schema of the route's declared
        answer (None when it declares none), `error` that of `error_body`."""
        content: dict[str, Any] = {}
        if answer is not None and self.json_answers:
            content["application/json"] = {"schema": answer}
        content.update(self.openapi_extra_content(contract))
        answers = {"200": {"description": "the answer", "content": content},
                   "default": {"description": "an error in the dialect's shape",
                               "content": {"application/json": {"schema": error}}}}
        return answers

    def openapi_extra_content(self, contract: Contract | None) -> dict[str, Any]:
        """The media types of a 200 besides JSON: the stream's, a file's."""
        content: dict[str, Any] = {}
        if contract is not None and contract.binary:
            content["*/*"] = {"schema": {"type": "string", "format": "binary"}}
        if contract is not None and contract.stream:
            content[self.media_type] = {"schema": {"type": "string", "description": self.stream_description}}
        return content

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"


class DialectRun(ABC):
    """One run rendered in a dialect; the instance keeps what the rendering needs (ids, what was sent)."""

    dialect: ClassVar[Dialect]

    @abstractmethod
    def stream(self, events: AsyncIterator[events_pb2.RunEvent]) -> AsyncIterator[bytes]:
        """The frames of the run, ending with the dialect's last frame also when the run or the rendering
        fails (reported in-band: the HTTP status went out with the first frame)."""

    async def answer(self, events: AsyncIterator[events_pb2.RunEvent]) -> web.StreamResponse:
        """The whole run as one response; a RunError raises (`run_failed`), so `@endpoint` renders it."""
        raise GatewayError(f"the {self.dialect.name} dialect only streams: send `stream: true`",
                           code=grpc.StatusCode.UNIMPLEMENTED)
