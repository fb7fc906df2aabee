"""Every HTTP route of the gateway except /healthz and /metrics, and what they share at run time."""

from __future__ import annotations

import grpc
from aiohttp import web

from gateway.auth import KeyRing, load_keys
from gateway.config import GatewayConfig
from gateway.endpoint import KEYS, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.openapi import routes as openapi_routes
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.retrieval import RETRIEVAL, Retrieval
from gateway.routes import (agents, attachments, chunks, completions, datasets, documents, envelope, mcp, openai, retrieve,
                            runs, sessions, ui)
from gateway.upstreams import Upstreams


def setup(app: web.Application, cfg: GatewayConfig, upstreams: web.AppKey[Upstreams]) -> None:
    """Register the routes; at start-up, load the API keys and make the orchestrator stubs on the channel
    `app[upstreams]` opened (by an earlier cleanup context)."""

    async def context(app: web.Application):
        app[KEYS] = KeyRing(load_keys(cfg))
        app[ORCHESTRATOR] = Orchestrator(app[upstreams].channels["orchestrator"], rpc_timeout_s=cfg.rpc_timeout_s,
                                         run_timeout_s=cfg.run_timeout_s)
        app[RETRIEVAL] = Retrieval(app[upstreams].channels["retrieval"], rpc_timeout_s=cfg.rpc_timeout_s,
                                   ingest_timeout_s=cfg.ingest_timeout_s)
        yield
        await app[ORCHESTRATOR].aclose()  # (its channel closes after this context's end)

    app.cleanup_ctx.append(context)
    completions.add_routes(app)  # first: /agents/chat/completions before /agents/{agent_id}/...
    attachments.add_routes(app)  # /agents/attachments/... before /agents/{agent_id}/... too
    agents.add_routes(app)
    sessions.add_routes(app)
    runs.add_routes(app)
    envelope.add_routes(app)
    openai.add_routes(app)
    datasets.add_routes(app)
    documents.add_routes(app)
    chunks.add_routes(app)
    retrieve.add_routes(app)
    mcp.add_routes(app)
    ui.add_routes(app)  # the run viewer at /ui/
    openapi_routes.add_routes(app)  # /openapi.json (built from every route registered here) and /docs
    # Last: any other path under an API prefix gets a 404 in that API's dialect, not aiohttp's text page.
    app.router.add_route("*", "/api/{tail:.*}", _no_route(Dialect.RAGFLOW))
    app.router.add_route("*", "/v1/{tail:.*}", _no_route(Dialect.OPENAI))


def _no_route(dialect: Dialect):
    @endpoint(dialect)
    async def no_route(request: web.Request) -> web.StreamResponse:
        raise GatewayError(f"no such endpoint: {request.method} {request.path}", code=grpc.StatusCode.NOT_FOUND)

    return no_route
