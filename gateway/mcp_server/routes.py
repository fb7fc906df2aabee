"""The MCP endpoints: `/mcp` (the tenant's published agents) and `/api/v1/agents/{agent_id}/mcp` (one agent),
GET, POST and DELETE as Streamable HTTP uses them.

The gateway authenticates (the tenant's API key as a Bearer token: 401 with `WWW-Authenticate: Bearer`
otherwise) and hands the request to the `mcp` package's `StreamableHTTPSessionManager`, an ASGI app, through
gateway/asgi.py, with the tenant in the scope's `state` and as the scope's `user`: the session manager lets
only the credential that created an MCP session use it, so one tenant cannot drive another's session even with
its id. MCP sessions live in the gateway process that created them (a client keeps talking to the same one);
the conversation itself is the orchestrator's session, in Redis, named by `session_id` in each result.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from gateway.agent_calls import find_agent
from gateway.asgi import serve_asgi
from gateway.auth import api_key_id
from gateway.contract import Contract
from gateway.endpoint import KEYS
from gateway.errors import GatewayError
from gateway.mcp_server.server import build_server
from gateway.orchestrator import ORCHESTRATOR
from gateway.responses import json_response

SESSIONS = web.AppKey("mcp_sessions", StreamableHTTPSessionManager)
_CONTRACT = Contract("MCP (Streamable HTTP): the agents as tools; JSON-RPC messages, answered as JSON or "
                     "server-sent events", stream=True, tags=("mcp server",))


def _rpc_error(status: int, message: str, **headers: str) -> web.Response:
    resp = json_response({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}, status=status)
    resp.headers.update(headers)
    return resp


async def _serve(request: web.Request, agent_id: str | None) -> web.StreamResponse:
    tenant = request.app[KEYS].tenant_for(request.headers.get("Authorization"))
    if tenant is None:
        return _rpc_error(401, "a valid API key is required: Authorization: Bearer <key>",
                          **{"WWW-Authenticate": 'Bearer realm="trellis"'})
    orch = request.app[ORCHESTRATOR]
    if agent_id is not None:
        try:
            if await find_agent(orch, tenant, agent_id) is None:
                return _rpc_error(404, f"agent {agent_id!r} not found")
        except GatewayError as err:
            return _rpc_error(err.http_status, err.message)
    state = {"tenant": tenant, "orchestrator": orch, "api_key_id": api_key_id(request.headers.get("Authorization"))}
    if agent_id is not None:
        state["agent_id"] = agent_id
    user = AuthenticatedUser(AccessToken(token="", client_id=tenant, scopes=[]))
    return await serve_asgi(request.app[SESSIONS].handle_request, request, state=state, scope_extra={"user": user})


async def mcp_all(request: web.Request) -> web.StreamResponse:
    return await _serve(request, None)


async def mcp_agent(request: web.Request) -> web.StreamResponse:
    return await _serve(request, request.match_info["agent_id"])


for _handler in (mcp_all, mcp_agent):
    _handler.contract = _CONTRACT  # type: ignore[attr-defined]


def add_routes(app: web.Application) -> None:
    async def sessions(app: web.Application):
        # The manager's task group must start and end in one task; aiohttp may run a context's start and end
        # in different ones, so it lives in a task of its own.
        manager = StreamableHTTPSessionManager(build_server())
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(hold())
        await started.wait()
        app[SESSIONS] = manager
        yield
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(sessions)
    for path, handler in (("/mcp", mcp_all), ("/api/v1/agents/{agent_id}/mcp", mcp_agent)):
        for method in ("GET", "POST", "DELETE"):
            app.router.add_route(method, path, handler)
