"""What every run route shares: building the RunRequest (which version runs, the session a run continues,
files and JSON fields) and answering with the run in the route's dialect (`respond`)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Callable

import grpc
from aiohttp import web
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb

from gateway import sse
from gateway.dialects import DialectRun
from gateway.endpoint import API_KEY_ID
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.protocol import CompletionWebhookIn
from gateway.responses import json_response


async def respond(request: web.Request, req: canvas_pb.RunRequest, run: DialectRun, *, stream: bool) -> web.StreamResponse:
    """Run `req` (or, with a Last-Event-ID header, rejoin the run it names) and answer with `run`: its stream,
    whose frames carry the ids to rejoin with, or its one answer."""
    orch = request.app[ORCHESTRATOR]
    req.api_key_id = request.get(API_KEY_ID, "")  # the key's own limits apply too (docs/limits.md)
    async with orch.run(req, last_event_id=request.headers.get("Last-Event-ID", ""), merge=stream) as events:
        if stream:
            return await sse.send(request, run.stream(events), events, media_type=run.dialect.media_type)
        return await run.answer(events)


async def start_in_background(request: web.Request, req: canvas_pb.RunRequest,
                              answer: Callable[[str, str], web.Response] | None = None) -> web.Response:
    """`"background": true`: start the run to go on without its caller and answer 202 with its ids once its
    first event came, which the orchestrator sends only after the run's start (record, lease, request) is
    in Redis: an acknowledged run is never lost. Then leave; the run continues (continue_on_disconnect).
    `GET .../runs/{run_id}/join` waits for its result, `.../events` streams it (gateway/routes/runs.py).
    `answer(run_id, session_id)` is the dialect's 202 (default: RAGFlow's, `started`)."""
    req.continue_on_disconnect = True
    req.api_key_id = request.get(API_KEY_ID, "")
    async with request.app[ORCHESTRATOR].run(req, merge=False) as events:
        first = await anext(aiter(events), None)
    if first is None:
        raise GatewayError("the run ended before it started", code=grpc.StatusCode.UNAVAILABLE)
    return (answer or started)(first.run_id, first.session_id)


def started(run_id: str, session_id: str) -> web.Response:
    """202, RAGFlow's envelope with the ids of a run still running (also `join`'s answer when it waited long enough)."""
    return json_response({"code": 0, "message": "success",
                          "data": {"run_id": run_id, "session_id": session_id, "status": "running"}}, status=202)


def completion_webhook(req: canvas_pb.RunRequest, hook: CompletionWebhookIn | None) -> None:
    """A request's own completion webhook (the body's `completion_webhook`, checked by gateway.protocol)."""
    if hook is not None:
        req.completion_webhook.CopyFrom(hook_pb.CompletionWebhook(url=hook.url, events=hook.events or [],
                                                                  secret=hook.secret))


def json_field(value: Any) -> str:
    """A `*_json` request field: "" when there is nothing to say."""
    if value is None or value == {} or value == "":
        return ""
    return json.dumps(value, ensure_ascii=False)


def agent_target(agent_id: str, *, version_id: str = "", draft: bool = False) -> canvas_pb.AgentTarget:
    """A named version, the draft, or (neither) the latest published version / the draft if none."""
    if version_id:
        return canvas_pb.AgentTarget(agent_id=agent_id, version_id=version_id)
    if draft:
        return canvas_pb.AgentTarget(agent_id=agent_id, draft=True)
    return canvas_pb.AgentTarget(agent_id=agent_id)


def session_target(session: session_pb.Session) -> canvas_pb.AgentTarget:
    """A session runs the version it was created with (empty version_id: the draft), never another."""
    return agent_target(session.agent_id, version_id=session.version_id, draft=not session.version_id)


async def load_session(orch: Orchestrator, tenant: str, agent_id: str, session_id: str) -> session_pb.Session:
    """The tenant's session `session_id`, which must belong to `agent_id` (when one is given)."""
    try:
        resp = await orch.unary(orch.sessions.GetSession, session_pb.GetSessionRequest(tenant_id=tenant, session_id=session_id))
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            raise
        raise GatewayError("Session not found!", code=grpc.StatusCode.NOT_FOUND, param="session_id") from None
    if agent_id and resp.session.agent_id != agent_id:
        raise GatewayError("Session does not belong to the requested agent.", code=grpc.StatusCode.FAILED_PRECONDITION,
                           param="session_id")
    return resp.session


def input_files(files: list[dict[str, Any]] | None) -> list[canvas_pb.InputFile]:
    """RAGFlow-style file objects: {name, mime_type, url} and optionally base64 `content`."""
    out = []
    for i, f in enumerate(files or []):
        content = b""
        if f.get("content"):
            try:
                content = base64.b64decode(str(f["content"]), validate=True)
            except (binascii.Error, ValueError):
                raise GatewayError(f"invalid request body: field `files.{i}.content` is not base64",
                                   param=f"files.{i}.content") from None
        out.append(canvas_pb.InputFile(name=str(f.get("name") or ""), url=str(f.get("url") or ""), content=content,
                                       mime_type=str(f.get("mime_type") or f.get("type") or "")))
    return out
