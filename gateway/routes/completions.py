"""RAGFlow's run endpoints and cancel (reference/ragflow.md 5.2):

- POST /api/v1/agents/chat/completions: `agent_id`, `query`; `stream` defaults to false; with
  `"openai-compatible": true` it answers in OpenAI's shape (gateway.routes.openai);
- POST /api/v1/agents/{agent_id}/completions: the legacy route ragflow-sdk 0.22 calls, with `question`;
  `stream` defaults to true, and only message / message_end (+ node_finished with return_trace) stream;
- POST /api/v1/tasks/{task_id}/cancel and PATCH /api/v1/tasks/{task_id} {"action": "stop"}: stop the run
  of session `task_id`.

Without a session the draft runs (RAGFlow's runtime canvas), or the latest published version with
`release: true`, or `version_id`; a session runs the version it was created with.
"""

from __future__ import annotations

import grpc
from aiohttp import web
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.dialects.ragflow import Mode, RagflowRun
from gateway.contract import Contract
from gateway.endpoint import STREAM, TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR
from gateway.protocol import OpenAIChatBody, PatchTaskBody, RagflowCompletionBody, parse, read_json, truthy
from gateway.responses import ChatCompletion, CompletionData
from gateway.routes import openai as openai_routes
from gateway.routes._runs import (agent_target, completion_webhook, input_files, json_field, load_session, respond,
                                  session_target, start_in_background)
from gateway.routes._views import ok
from gateway.routes.agents import NO_ACCESS


async def _run(request: web.Request, body: RagflowCompletionBody, agent_id: str, *,
               legacy: bool) -> web.StreamResponse:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    session_id = body.session_id or ""
    mode = Mode.LEGACY if legacy else Mode.WORKFLOW
    user_id = body.user_id or tenant  # RAGFlow: the tenant when the request names no user
    if session_id:
        session = await load_session(orch, tenant, agent_id, session_id)
        target = session_target(session)
        user_id = body.user_id or session.user_id or tenant
        if not legacy and session.source == "agent":
            mode = Mode.SESSION
    else:
        target = agent_target(agent_id, version_id=body.version_id or "", draft=not truthy(body.release))
    return_trace = bool(body.return_trace)
    custom_header = body.custom_header if isinstance(body.custom_header, dict) else None
    req = canvas_pb.RunRequest(
        agent=target, tenant_id=tenant, query=body.text(), inputs_json=json_field(body.inputs),
        files=input_files(body.files), session_id=session_id, user_id=user_id,
        return_trace=return_trace, chat_template_kwargs_json=json_field(body.chat_template_kwargs),
        custom_header_json=json_field(custom_header), continue_on_disconnect=body.on_disconnect == "continue",
        multitask_strategy=body.multitask_strategy or "")
    completion_webhook(req, body.completion_webhook)
    if body.background:
        return await start_in_background(request, req)
    stream = body.stream if body.stream is not None else legacy
    return await respond(request, req, RagflowRun(mode, return_trace=return_trace, session_id=session_id), stream=stream)


_RUN = Contract("Run an agent (RAGFlow events, or OpenAI's shape with openai-compatible)", body=RagflowCompletionBody,
                response=CompletionData | ChatCompletion, stream=True, tags=("completions",))
_TASK = Contract("Stop the run of a session", response=bool, tags=("completions",))


@endpoint(Dialect.RAGFLOW, contract=_RUN)
async def chat_completions(request: web.Request) -> web.StreamResponse:
    raw = await read_json(request)
    body = parse(RagflowCompletionBody, raw)
    if not body.agent_id:
        raise GatewayError("`agent_id` is required.", param="agent_id")
    if body.openai_compatible:
        if not raw.get("messages"):
            raise GatewayError("You must provide at least one message.", param="messages", ragflow_code=102)
        chat = parse(OpenAIChatBody, {**raw, "stream": bool(body.stream)})
        return await openai_routes.run_chat(request, body.agent_id, chat)
    try:
        return await _run(request, body, body.agent_id, legacy=False)
    except GatewayError as err:
        # RAGFlow's 103 for an agent the key cannot reach (a new run; a session's own errors stand).
        if (err.code == grpc.StatusCode.NOT_FOUND and not body.session_id and request.get(STREAM) is None
                and err.message == f"agent {body.agent_id!r} not found"):
            raise GatewayError(NO_ACCESS, code=grpc.StatusCode.FAILED_PRECONDITION) from None
        raise


@endpoint(Dialect.RAGFLOW, contract=_RUN)
async def legacy_completions(request: web.Request) -> web.StreamResponse:
    body = parse(RagflowCompletionBody, await read_json(request))
    return await _run(request, body, request.match_info["agent_id"], legacy=True)


async def _cancel(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = canvas_pb.CancelRequest(tenant_id=tenant, session_id=request.match_info["task_id"])
    try:
        await orch.unary(orch.canvas.Cancel, req)
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            raise
    return ok(True)  # RAGFlow: true once the stop is requested, for a task it does not know too


@endpoint(Dialect.RAGFLOW, contract=_TASK)
async def cancel_task(request: web.Request) -> web.Response:
    return await _cancel(request)


@endpoint(Dialect.RAGFLOW, contract=Contract("Stop the run of a session", body=PatchTaskBody, response=bool,
                                             tags=("completions",)))
async def patch_task(request: web.Request) -> web.Response:
    raw = await read_json(request)
    if raw.get("action") is None:
        raise GatewayError("required argument are missing: action; ", param="action")
    action = raw["action"]
    if action != "stop":
        raise GatewayError(f"Invalid action '{action}'. Only 'stop' is supported.", param="action")
    return await _cancel(request)


def add_routes(app: web.Application) -> None:
    r = app.router
    # Before /agents/{agent_id}/completions, which would otherwise take "chat" for an agent id.
    r.add_post("/api/v1/agents/chat/completions", chat_completions)
    r.add_post("/api/v1/agents/{agent_id}/completions", legacy_completions)
    r.add_post("/api/v1/tasks/{task_id}/cancel", cancel_task)
    r.add_patch("/api/v1/tasks/{task_id}", patch_task)
