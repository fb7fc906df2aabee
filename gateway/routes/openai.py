"""OpenAI's chat API over stored agents: the agent id is the `model`.

- POST /v1/chat/completions and RAGFlow's POST /api/v1/agents_openai/{agent_id}/chat/completions;
- GET /v1/models (the tenant's agents) and GET /v1/models/{agent_id}.

`session_id` (or `id`, or `metadata.id`) continues that session: only the last user message is sent, the
history is the session's. Without one, each call creates a fresh session (latest published version, or
the draft) and the messages before the last user message are passed as its history (`_history`).

Trellis' extension fields (the official client sends them through `extra_body`): `inputs`, `on_disconnect`,
`background` (202 with the run's ids, `started`) and `completion_webhook` ({url, events, secret}).
"""

from __future__ import annotations

import functools
import time

import grpc
from aiohttp import web
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.dialects._common import ts_ms
from gateway.dialects.openai import OpenAIRun
from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR
from gateway.protocol import ChatMessageIn, OpenAIChatBody, read_body
from gateway.responses import ChatCompletion, ChatCompletionRun, ModelList, ModelOut, json_response

from gateway.routes._runs import (agent_target, completion_webhook, json_field, load_session, respond, session_target,
                                  start_in_background)

_CHAT = Contract("Chat completion with an agent as the model", body=OpenAIChatBody, response=ChatCompletion, stream=True,
                 accepted=ChatCompletionRun, tags=("openai",))


def split_messages(messages: list[ChatMessageIn]) -> tuple[str, list[ChatMessageIn]]:
    """(the last user message's text, the user/assistant turns before it). System messages are dropped:
    the agent's own prompts govern it, as in RAGFlow."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            history = [m for m in messages[:i] if m.role in ("user", "assistant") and m.text()]
            return messages[i].text(), history
    raise GatewayError('invalid request body: field `messages` has no message with role "user"', param="messages")


def _attach_history(req: canvas_pb.RunRequest, history: list[ChatMessageIn]) -> None:
    for m in history:
        req.history.add(role=m.role, content=m.text())


async def run_chat(request: web.Request, agent_id: str, body: OpenAIChatBody) -> web.StreamResponse:
    """One chat completion against `agent_id` (empty: the body's `model`); also serves RAGFlow's
    `openai-compatible` mode. The body is let go of once the run's request is built: a stream holds what its
    handler's frames hold for as long as it lasts (docs/speed-policies.md, "Many held streams")."""
    agent_id = agent_id or body.model
    if not agent_id:
        raise GatewayError("invalid request body: field `model` is required (the agent id)", param="model")
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    query, history = split_messages(body.messages)
    user_id = body.user or tenant
    if conversation := body.conversation_id():
        session = await load_session(orch, tenant, agent_id, conversation)
        history = []  # the session has its own
        req = canvas_pb.RunRequest(agent=session_target(session), session_id=session.id,
                                   user_id=session.user_id or user_id)
    else:  # the run creates the session, as CreateSession would: one call; the id comes with its events
        req = canvas_pb.RunRequest(agent=agent_target(agent_id), create_session=True, user_id=user_id)
    req.tenant_id, req.query, req.inputs_json = tenant, query, json_field(body.inputs)
    _attach_history(req, history)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    run = OpenAIRun(model=agent_id, completion_id=req.session_id, include_usage=include_usage)
    req.continue_on_disconnect = body.on_disconnect == "continue"
    req.answer_only = True  # the dialect renders nothing else (OpenAIRun.delta)
    completion_webhook(req, body.completion_webhook)
    if body.background:
        return await start_in_background(request, req, functools.partial(started, agent_id))
    stream = bool(body.stream)
    del body, history  # (copied into `req`)
    return await respond(request, req, run, stream=stream)


def started(agent_id: str, run_id: str, session_id: str) -> web.Response:
    """`"background": true`'s 202. OpenAI's chat API has no background mode; this follows its Responses API's
    (`id`, `object`, `status`), with the ids to join (`GET /api/v1/agents/{model}/runs/{run_id}/join?dialect=openai`
    answers the chat.completion) and `session_id` to continue the conversation."""
    return json_response({"id": run_id, "object": "chat.completion.run", "created": int(time.time()), "model": agent_id,
                          "status": "in_progress", "run_id": run_id, "session_id": session_id}, status=202)


@endpoint(Dialect.OPENAI, contract=_CHAT)
async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await run_chat(request, "", await read_body(request, OpenAIChatBody))  # no reference kept here


@endpoint(Dialect.OPENAI, contract=_CHAT)
async def agent_chat_completions(request: web.Request) -> web.StreamResponse:
    return await run_chat(request, request.match_info["agent_id"], await read_body(request, OpenAIChatBody))


def _model(a: agent_pb.Agent) -> dict:
    return {"id": a.id, "object": "model", "created": ts_ms(a.created_at) // 1000, "owned_by": a.tenant_id,
            "name": a.title, "description": a.description}


@endpoint(Dialect.OPENAI, contract=Contract("The tenant's agents as models", response=ModelList, tags=("openai",)))
async def list_models(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    agents: list[agent_pb.Agent] = []
    page = 1
    while True:
        resp = await orch.unary(orch.agents.ListAgents, agent_pb.ListAgentsRequest(
            tenant_id=tenant, page=page, page_size=100, orderby="create_time", desc=False))
        agents += resp.agents
        if not resp.agents or len(agents) >= resp.total:
            break
        page += 1
    return json_response({"object": "list", "data": [_model(a) for a in agents]})


@endpoint(Dialect.OPENAI, contract=Contract("One agent as a model", response=ModelOut, tags=("openai",)))
async def get_model(request: web.Request) -> web.Response:
    orch, tenant, model = request.app[ORCHESTRATOR], request[TENANT], request.match_info["model"]
    try:
        agent = (await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=model))).agent
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise GatewayError(f"The model `{model}` does not exist", code=grpc.StatusCode.NOT_FOUND, param="model",
                           openai_code="model_not_found") from None
    return json_response(_model(agent))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_post("/api/v1/agents_openai/{agent_id}/chat/completions", agent_chat_completions)
    r.add_get("/v1/models", list_models)
    r.add_get("/v1/models/{model}", get_model)
