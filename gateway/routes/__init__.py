"""Every HTTP route of the gateway except /healthz and /metrics, and what they share at run time."""

from __future__ import annotations

import re

import grpc
from aiohttp import web

from gateway.auth import KeyRing, load_keys
from gateway.config import GatewayConfig
from gateway.endpoint import KEYS, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.openapi import routes as openapi_routes
from gateway.llm_models import MODELS, ModelCatalog
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.responses import json_response
from gateway.retrieval import RETRIEVAL, Retrieval
from gateway.routes import (agents, attachments, chunks, completions, datasets, document_files, documents, envelope,
                            mcp, openai, retrieve, runs, schedules, sessions, ui, webhooks)
from gateway.upstreams import Upstreams
from gateway import a2a, mcp_server


_CATCH_ALL = "/api/{tail:.*}"


def setup(app: web.Application, cfg: GatewayConfig, upstreams: web.AppKey[Upstreams]) -> None:
    """Register the routes; at start-up, load the API keys and make the orchestrator stubs on the channel
    `app[upstreams]` opened (by an earlier cleanup context)."""

    async def context(app: web.Application):
        app[KEYS] = KeyRing(load_keys(cfg))
        app[ORCHESTRATOR] = Orchestrator(app[upstreams].channels["orchestrator"], rpc_timeout_s=cfg.rpc_timeout_s,
                                         run_timeout_s=cfg.run_timeout_s, run_lease_s=cfg.run_lease_s)
        app[MODELS] = ModelCatalog(app[upstreams].channels["llm_gateway"], timeout_s=cfg.rpc_timeout_s)
        app[RETRIEVAL] = Retrieval(app[upstreams].channels["retrieval"], rpc_timeout_s=cfg.rpc_timeout_s,
                                   ingest_timeout_s=cfg.ingest_timeout_s)
        yield
        await app[ORCHESTRATOR].aclose()  # (its channel closes after this context's end)

    app.cleanup_ctx.append(context)
    completions.add_routes(app)  # first: /agents/chat/completions before /agents/{agent_id}/...
    attachments.add_routes(app)  # /agents/attachments/... before /agents/{agent_id}/... too
    webhooks.add_routes(app)  # RAGFlow's webhook trigger: /agents/{agent_id}/webhook, /test, /logs
    agents.add_routes(app)
    sessions.add_routes(app)
    runs.add_routes(app)
    schedules.add_routes(app, upstreams)  # schedules, completion webhooks, a run's deliveries
    envelope.add_routes(app)
    openai.add_routes(app)
    datasets.add_routes(app)
    documents.add_routes(app)
    document_files.add_routes(app)
    chunks.add_routes(app)
    retrieve.add_routes(app)
    mcp.add_routes(app)
    mcp_server.add_routes(app)  # the agents as MCP tools: /mcp and /api/v1/agents/{agent_id}/mcp
    a2a.add_routes(app)  # the agents as A2A agents: /a2a/{agent_id} and the agent cards
    ui.add_routes(app)  # the run viewer at /ui/
    openapi_routes.add_routes(app)  # /openapi.json (built from every route registered here) and /docs
    datasets.add_index_route(app)  # after every /api/v1/datasets/{id}/<name> route
    # Last: any other path under an API prefix gets a 404 in that API's dialect, not aiohttp's text page.
    app.router.add_route("*", _CATCH_ALL, _ragflow_no_route)
    app.router.add_route("*", "/v1/{tail:.*}", _no_route(Dialect.OPENAI))


async def _ragflow_no_route(request: web.Request) -> web.StreamResponse:
    """RAGFlow's answers for a path it serves no route at, key or no key: a path with an empty segment is
    read with its slashes merged (`/datasets//documents` is `/datasets/documents`), as RAGFlow's server does
    (here by a 308 to it, which clients follow with the same method and body); a path served for other
    methods is its 405 (code 100); any other a JSON 404."""
    merged = re.sub(r"/{2,}", "/", request.path)
    if merged != request.path:
        raise web.HTTPPermanentRedirect(request.rel_url.with_path(merged))
    for resource in request.app.router.resources():
        if resource.canonical == _CATCH_ALL:
            continue
        match, allowed = await resource.resolve(request)
        if match is None and allowed:
            return json_response({"code": 100, "data": None, "message": "<MethodNotAllowed '405: Method Not Allowed'>"})
    return json_response({"code": 404, "error": "Not Found", "message": f"Not Found: {request.path}"}, status=404)


def _no_route(dialect: Dialect):
    @endpoint(dialect)
    async def no_route(request: web.Request) -> web.StreamResponse:
        raise GatewayError(f"no such endpoint: {request.method} {request.path}", code=grpc.StatusCode.NOT_FOUND)

    return no_route
