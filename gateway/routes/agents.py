"""RAGFlow's agent CRUD, versions and run logs: /api/v1/agents[/{agent_id}[/versions[/{version_id}]|/logs/{message_id}]].

An invalid DSL on create or update comes back from the orchestrator as INVALID_ARGUMENT naming each
component, and is answered as code 101 with that message. `release: true` on create or update also
publishes an immutable version.
"""

from __future__ import annotations

import json

from aiohttp import web
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.protocol import (
    CreateAgentBody,
    PublishBody,
    UpdateAgentBody,
    dsl_text,
    query_bool,
    query_int,
    read_body,
    truthy,
)
from gateway.routes._views import agent_view, ok, version_view


async def _get(orch: Orchestrator, tenant: str, agent_id: str) -> agent_pb.Agent:
    return (await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=agent_id))).agent


async def _publish(orch: Orchestrator, tenant: str, agent_id: str, title: str = "") -> agent_pb.AgentVersion:
    req = agent_pb.PublishVersionRequest(tenant_id=tenant, agent_id=agent_id, title=title)
    return (await orch.unary(orch.agents.PublishVersion, req)).version


@endpoint(Dialect.RAGFLOW)
async def list_agents(request: web.Request) -> web.Response:
    """A bare list plus top-level `total`: what ragflow-sdk up to 0.26 iterates (`for data in res["data"]`)."""
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    include_dsl = query_bool(request, "dsl", True)
    if agent_id := request.query.get("id"):
        return ok([agent_view(await _get(orch, tenant, agent_id), include_dsl=include_dsl)], total=1)
    title = request.query.get("title", "")
    req = agent_pb.ListAgentsRequest(
        tenant_id=tenant, page=query_int(request, "page", 1), page_size=query_int(request, "page_size", 30),
        orderby=request.query.get("orderby", "update_time"), desc=query_bool(request, "desc", True),
        keywords=title or request.query.get("keywords", ""), include_dsl=include_dsl)
    resp = await orch.unary(orch.agents.ListAgents, req)
    agents = [a for a in resp.agents if not title or a.title == title]
    total = len(agents) if title else resp.total
    return ok([agent_view(a, include_dsl=include_dsl) for a in agents], total=total)


@endpoint(Dialect.RAGFLOW)
async def create_agent(request: web.Request) -> web.Response:
    body = await read_body(request, CreateAgentBody)
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = agent_pb.CreateAgentRequest(
        tenant_id=tenant, title=body.title.strip(), description=body.description or "", dsl_json=dsl_text(body.dsl),
        canvas_type=body.canvas_type or "", canvas_category=body.canvas_category or "")
    agent = (await orch.unary(orch.agents.CreateAgent, req)).agent
    if truthy(body.release):
        await _publish(orch, tenant, agent.id)
        agent = await _get(orch, tenant, agent.id)
    return ok(agent_view(agent))


@endpoint(Dialect.RAGFLOW)
async def get_agent(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    return ok(agent_view(await _get(orch, tenant, request.match_info["agent_id"])))


@endpoint(Dialect.RAGFLOW)
async def update_agent(request: web.Request) -> web.Response:
    body = await read_body(request, UpdateAgentBody)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    fields = {"title": body.title.strip() if body.title is not None else None, "description": body.description,
              "canvas_type": body.canvas_type, "canvas_category": body.canvas_category,
              "dsl_json": dsl_text(body.dsl) if body.dsl is not None else None}
    given = {k: v for k, v in fields.items() if v is not None}  # `optional` fields: unset ones stay unchanged
    req = agent_pb.UpdateAgentRequest(tenant_id=tenant, agent_id=agent_id, **given)
    await orch.unary(orch.agents.UpdateAgent, req)
    if truthy(body.release):
        await _publish(orch, tenant, agent_id)
    return ok(True)


@endpoint(Dialect.RAGFLOW)
async def delete_agent(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = agent_pb.DeleteAgentRequest(tenant_id=tenant, agent_id=request.match_info["agent_id"])
    await orch.unary(orch.agents.DeleteAgent, req)
    return ok(True)


@endpoint(Dialect.RAGFLOW)
async def list_versions(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = agent_pb.ListVersionsRequest(tenant_id=tenant, agent_id=request.match_info["agent_id"])
    versions = (await orch.unary(orch.agents.ListVersions, req)).versions
    return ok([version_view(v) for v in versions], total=len(versions))


@endpoint(Dialect.RAGFLOW)
async def publish_version(request: web.Request) -> web.Response:
    body = await read_body(request, PublishBody)
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    return ok(version_view(await _publish(orch, tenant, request.match_info["agent_id"], body.title or "")))


@endpoint(Dialect.RAGFLOW)
async def get_version(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = agent_pb.GetVersionRequest(tenant_id=tenant, agent_id=request.match_info["agent_id"],
                                     version_id=request.match_info["version_id"])
    return ok(version_view((await orch.unary(orch.agents.GetVersion, req)).version))


@endpoint(Dialect.RAGFLOW)
async def delete_version(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = agent_pb.DeleteVersionRequest(tenant_id=tenant, agent_id=request.match_info["agent_id"],
                                        version_id=request.match_info["version_id"])
    await orch.unary(orch.agents.DeleteVersion, req)
    return ok(True)


@endpoint(Dialect.RAGFLOW)
async def run_log(request: web.Request) -> web.Response:
    """RAGFlow's /agents/{id}/logs/{message_id}: the run's tool calls (its shape) plus status and Agent thoughts."""
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = canvas_pb.GetRunLogRequest(tenant_id=tenant, run_id=request.match_info["message_id"],
                                     agent_id=request.match_info["agent_id"])
    log = await orch.unary(orch.canvas.GetRunLog, req)
    return ok({"message_id": log.run_id, "session_id": log.session_id, "status": log.status, "error": log.error or None,
               "started_at": log.started_at, "finished_at": log.finished_at or None,
               "logs": json.loads(log.tool_calls_json or "[]"), "thoughts": json.loads(log.thoughts_json or "[]")})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/agents", list_agents)
    r.add_post("/api/v1/agents", create_agent)
    r.add_get("/api/v1/agents/{agent_id}", get_agent)
    r.add_put("/api/v1/agents/{agent_id}", update_agent)
    r.add_delete("/api/v1/agents/{agent_id}", delete_agent)
    r.add_get("/api/v1/agents/{agent_id}/versions", list_versions)
    r.add_post("/api/v1/agents/{agent_id}/versions", publish_version)
    r.add_get("/api/v1/agents/{agent_id}/versions/{version_id}", get_version)
    r.add_delete("/api/v1/agents/{agent_id}/versions/{version_id}", delete_version)
    r.add_get("/api/v1/agents/{agent_id}/logs/{message_id}", run_log)
