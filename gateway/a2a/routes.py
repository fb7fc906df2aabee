"""The A2A endpoints:

- POST /a2a/{agent_id}: JSON-RPC, served by the a2a-sdk's dispatcher (an ASGI app, through gateway/asgi.py):
  the 1.0 methods (`SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`,
  `SubscribeToTask`, the push-notification configs) with `A2A-Version: 1.0`, and the 0.3 names
  (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe`, ...) without it;
- GET /a2a/{agent_id}/.well-known/agent-card.json: the agent's card;
- GET /.well-known/agent-card.json: the root card, listing the caller's published agents.

Every route but the root card needs the tenant's API key (Bearer); an agent of another tenant is a 404.
"""

from __future__ import annotations

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from aiohttp import web
from starlette.applications import Starlette

from gateway.a2a.cards import agent_card, card_json, root_card
from gateway.a2a.handler import TrellisRequestHandler
from gateway.a2a.push import PushConfigs
from gateway.a2a.refusals import STATE_KEY, answering_refusals
from gateway.agent_calls import find_agent
from gateway.asgi import serve_asgi
from gateway.auth import api_key_id
from gateway.config import CONFIG
from gateway.contract import Contract
from gateway.endpoint import KEYS
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR
from gateway.responses import json_response
from gateway.upstreams import UPSTREAMS  # (opened by the app's first cleanup context)

A2A_APP = web.AppKey("a2a_app", object)  # the SDK's Starlette app, answering refusals (refusals.py)
PUSH = web.AppKey("a2a_push", PushConfigs)
_TAGS = ("a2a",)


class _Tenant(User):
    def __init__(self, tenant: str) -> None:
        self._tenant = tenant

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._tenant


class _Context(DefaultServerCallContextBuilder):
    """What the gateway authenticated (scope state) into the SDK's call context: the tenant is the context's
    user, which also owns the push-notification configs it creates."""

    def build(self, request) -> ServerCallContext:
        context = super().build(request)
        context.state.update(tenant=request.state.tenant, orchestrator=request.state.orchestrator,
                             agent_id=request.state.agent_id, base_url=request.state.base_url,
                             api_key_id=request.state.api_key_id,
                             **{STATE_KEY: getattr(request.state, STATE_KEY)})
        return context

    def build_user(self, request) -> User:
        return _Tenant(request.state.tenant)


def _base_url(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _rpc_error(status: int, message: str) -> web.Response:
    resp = json_response({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}, status=status)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="trellis"'
    return resp


async def _authorized(request: web.Request) -> tuple[str | None, web.Response | None]:
    """(tenant, None), or (None, the error to answer) when the key is wrong or the agent is not the tenant's."""
    tenant = request.app[KEYS].tenant_for(request.headers.get("Authorization"))
    if tenant is None:
        return None, _rpc_error(401, "a valid API key is required: Authorization: Bearer <key>")
    agent_id = request.match_info["agent_id"]
    try:
        if await find_agent(request.app[ORCHESTRATOR], tenant, agent_id) is None:
            return None, _rpc_error(404, f"agent {agent_id!r} not found")
    except GatewayError as err:
        return None, _rpc_error(err.http_status, err.message)
    return tenant, None


async def jsonrpc(request: web.Request) -> web.StreamResponse:
    tenant, refused = await _authorized(request)
    if refused is not None:
        return refused
    state = {"tenant": tenant, "orchestrator": request.app[ORCHESTRATOR], "agent_id": request.match_info["agent_id"],
             "base_url": _base_url(request), "api_key_id": api_key_id(request.headers.get("Authorization")),
             STATE_KEY: []}
    return await serve_asgi(request.app[A2A_APP], request, state=state)


async def agent_card_route(request: web.Request) -> web.Response:
    tenant, refused = await _authorized(request)
    if refused is not None:
        return refused
    assert tenant is not None
    card = await agent_card(request.app[ORCHESTRATOR], tenant, request.match_info["agent_id"], _base_url(request))
    return json_response(card_json(card))


async def root_card_route(request: web.Request) -> web.Response:
    tenant = request.app[KEYS].tenant_for(request.headers.get("Authorization"))
    return json_response(card_json(await root_card(request.app[ORCHESTRATOR], tenant, _base_url(request))))


jsonrpc.contract = Contract("A2A JSON-RPC (1.0 methods with A2A-Version: 1.0, the 0.3 names without); answers "  # type: ignore[attr-defined]
                            "JSON or server-sent events", stream=True, tags=_TAGS)
agent_card_route.contract = Contract("An agent's A2A agent card", tags=_TAGS)  # type: ignore[attr-defined]
root_card_route.contract = Contract("The root A2A agent card: the caller's published agents as skills",  # type: ignore[attr-defined]
                                    tags=_TAGS)


def add_routes(app: web.Application) -> None:
    async def context(app: web.Application):

        push = PushConfigs(app[UPSTREAMS].channels["orchestrator"], private_hosts=app[CONFIG].a2a_push_private_hosts)
        app[PUSH] = push
        handler = TrellisRequestHandler(push)
        app[A2A_APP] = answering_refusals(Starlette(routes=create_jsonrpc_routes(
            handler, "/a2a/{agent_id}", context_builder=_Context(), enable_v0_3_compat=True)))
        yield

    app.cleanup_ctx.append(context)
    app.router.add_get("/.well-known/agent-card.json", root_card_route)
    app.router.add_get("/a2a/{agent_id}/.well-known/agent-card.json", agent_card_route)
    app.router.add_post("/a2a/{agent_id}", jsonrpc)
