"""A fourth dialect, written the way docs/adding-a-dialect.md says, touching no gateway file: a run as
newline-delimited JSON, one object per line.

    POST /ndjson/agents/{agent_id}/run   {"query": "...", "stream": true}

Lines: `{"kind": "text", "node", "text"}` per answer delta, `{"kind": "<event kind>", "node"}` per other event,
`{"kind": "error", "message", "code"}` on a failure, and always `{"kind": "end"}` last. Without `stream`, one
JSON object `{"answer": "<the whole text>", "events": <count>}`. Errors before the run: `{"error", "code"}`.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import orjson
from aiohttp import web
from pydantic import BaseModel
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import events_pb2

from gateway.contract import Contract, body
from gateway.dialects import Dialect, DialectRun
from gateway.dialects._common import delta_text, run_failed, unexpected
from gateway.endpoint import TENANT, endpoint
from gateway.errors import GatewayError
from gateway.routes._runs import agent_target, respond

PATH = "/ndjson/agents/{agent_id}/run"
END = b'{"kind":"end"}\n'


class NdjsonError(BaseModel):
    error: str
    code: str


class NdjsonAnswer(BaseModel):
    answer: str
    events: int


class NdjsonRunBody(BaseModel):
    query: str = ""
    stream: bool = True


class NdjsonDialect(Dialect):
    name = "ndjson"
    error_model = NdjsonError
    media_type = "application/x-ndjson"
    stream_description = "one JSON object per line; the last is {\"kind\": \"end\"}"

    def error_body(self, err: GatewayError) -> dict[str, Any]:
        return {"error": err.message, "code": err.code.name}


NDJSON = NdjsonDialect()


def line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj) + b"\n"


class NdjsonRun(DialectRun):
    dialect = NDJSON

    def __init__(self) -> None:
        self.text: list[str] = []
        self.events = 0

    def render(self, ev: events_pb2.RunEvent) -> dict[str, Any]:
        self.events += 1
        kind = ev.WhichOneof("kind")
        if kind == "error":
            raise run_failed(ev.error)
        if kind == "message_delta":
            text = delta_text(ev.message_delta)
            self.text.append(text)
            return {"kind": "text", "node": ev.node_id, "text": text}
        return {"kind": kind, "node": ev.node_id}

    async def stream(self, events: AsyncIterator[events_pb2.RunEvent]) -> AsyncIterator[bytes]:
        try:
            async for ev in events:
                yield line(self.render(ev))
        except Exception as exc:  # noqa: BLE001 (the stream still ends with its last line)
            err = exc if isinstance(exc, GatewayError) else unexpected(exc)
            yield line({"kind": "error", "message": err.message, "code": err.code.name})
        yield END

    async def answer(self, events: AsyncIterator[events_pb2.RunEvent]) -> web.Response:
        async for ev in events:
            self.render(ev)
        return web.json_response({"answer": "".join(self.text), "events": self.events})


@endpoint(NDJSON, contract=Contract("Run an agent as NDJSON", body=NdjsonRunBody, response=NdjsonAnswer, stream=True))
async def run(request: web.Request) -> web.StreamResponse:
    b: NdjsonRunBody = await body(request)
    req = canvas_pb.RunRequest(agent=agent_target(request.match_info["agent_id"]), tenant_id=request[TENANT],
                               query=b.query, user_id=request[TENANT])
    return await respond(request, req, NdjsonRun(), stream=b.stream)


def add_routes(app: web.Application) -> None:
    app.router.add_post(PATH, run)
