"""RAGFlow's agent CRUD, versions and run logs: /api/v1/agents[/{agent_id}[/versions[/{version_id}]|/logs/{message_id}]],
and its support routes /agents/prompts, /agents/templates, /agents/test_db_connection and /agents/rerun.

Codes and messages are RAGFlow's (its api/apps/restful_apis/agent_api.py): an agent the key cannot reach
is 103 "Make sure you have permission to access the agent." on update and on its versions, sessions and
logs, 103 "Only the owner of the agent is authorized for this operation." on delete, and 102 "canvas not
found." on get. An invalid DSL on create or update comes back from the orchestrator as INVALID_ARGUMENT
naming each component, answered as 101. `release: true` on create or update also publishes a version.
"""

from __future__ import annotations

import json

import grpc
from aiohttp import web
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.protocol import CreateAgentBody, PublishBody, UpdateAgentBody, dsl_text, read_json, truthy
from gateway.ragflow_models import ListAgentsQuery
from gateway.responses import AgentList, AgentOut, AgentUpdated, RunLogOut, VersionOut
from gateway.routes._views import agent_view, ok, version_view

NO_ACCESS = "Make sure you have permission to access the agent."
NOT_OWNER = "Only the owner of the agent is authorized for this operation."
_TAGS = ("agents",)


async def _get(orch: Orchestrator, tenant: str, agent_id: str) -> agent_pb.Agent:
    return (await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=agent_id))).agent


async def accessible(orch: Orchestrator, tenant: str, agent_id: str, message: str = NO_ACCESS) -> agent_pb.Agent:
    """The tenant's agent, or RAGFlow's 103 `message` when it has none by that id."""
    try:
        return await _get(orch, tenant, agent_id)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise GatewayError(message, code=grpc.StatusCode.FAILED_PRECONDITION) from None


async def _publish(orch: Orchestrator, tenant: str, agent_id: str, title: str = "") -> agent_pb.AgentVersion:
    req = agent_pb.PublishVersionRequest(tenant_id=tenant, agent_id=agent_id, title=title)
    return (await orch.unary(orch.agents.PublishVersion, req)).version


@endpoint(Dialect.RAGFLOW, contract=Contract("List agents", query=ListAgentsQuery, response=AgentList, tags=_TAGS))
async def list_agents(request: web.Request) -> web.Response:
    """`data: {"canvas": [...], "total": N}`, as RAGFlow answers (ragflow-sdk 0.22 read a bare list:
    see gateway/README.md)."""
    orch, tenant, q = request.app[ORCHESTRATOR], request[TENANT], query(request)
    if q.id:
        try:
            agents = [await _get(orch, tenant, q.id)]
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            agents = []
        return ok({"canvas": [agent_view(a, include_dsl=q.dsl) for a in agents], "total": len(agents)})
    req = agent_pb.ListAgentsRequest(
        tenant_id=tenant, page=q.page, page_size=q.page_size, orderby=q.orderby, desc=q.desc,
        keywords=q.title or q.keywords, include_dsl=q.dsl)
    resp = await orch.unary(orch.agents.ListAgents, req)
    agents = [a for a in resp.agents if not q.title or a.title == q.title]
    total = len(agents) if q.title else resp.total
    return ok({"canvas": [agent_view(a, include_dsl=q.dsl) for a in agents], "total": total})


@endpoint(Dialect.RAGFLOW, contract=Contract("Create an agent", body=CreateAgentBody, response=AgentOut, tags=_TAGS))
async def create_agent(request: web.Request) -> web.Response:
    req_body = await body(request)
    if req_body.dsl is None:
        raise GatewayError("No DSL data in request.", param="dsl")
    if req_body.title is None:
        raise GatewayError("No title in request.", param="title")
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = agent_pb.CreateAgentRequest(
        tenant_id=tenant, title=req_body.title.strip(), description=req_body.description or "",
        dsl_json=dsl_text(req_body.dsl), canvas_type=req_body.canvas_type or "",
        canvas_category=req_body.canvas_category or "")
    agent = (await orch.unary(orch.agents.CreateAgent, req)).agent
    if truthy(req_body.release):
        await _publish(orch, tenant, agent.id)
        agent = await _get(orch, tenant, agent.id)
    return ok(agent_view(agent))


@endpoint(Dialect.RAGFLOW, contract=Contract("Get an agent", response=AgentOut, tags=_TAGS))
async def get_agent(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    try:
        agent = await _get(orch, tenant, request.match_info["agent_id"])
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise GatewayError("canvas not found.", code=grpc.StatusCode.NOT_FOUND) from None
    return ok(agent_view(agent))


@endpoint(Dialect.RAGFLOW, contract=Contract("Update an agent", body=UpdateAgentBody, response=AgentUpdated, tags=_TAGS))
async def update_agent(request: web.Request) -> web.Response:
    req_body = await body(request)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    fields = {"title": req_body.title.strip() if req_body.title is not None else None,
              "description": req_body.description, "canvas_type": req_body.canvas_type,
              "canvas_category": req_body.canvas_category,
              "dsl_json": dsl_text(req_body.dsl) if req_body.dsl is not None else None}
    given = {k: v for k, v in fields.items() if v is not None}  # `optional` fields: unset ones stay unchanged
    req = agent_pb.UpdateAgentRequest(tenant_id=tenant, agent_id=agent_id, **given)
    agent = (await orch.unary(orch.agents.UpdateAgent, req)).agent
    if truthy(req_body.release):
        await _publish(orch, tenant, agent_id)
    return ok({"update_time": agent_view(agent, include_dsl=False)["update_time"]})


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete an agent", response=bool, tags=_TAGS))
async def delete_agent(request: web.Request) -> web.Response:
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id, NOT_OWNER)
    await orch.unary(orch.agents.DeleteAgent, agent_pb.DeleteAgentRequest(tenant_id=tenant, agent_id=agent_id))
    return ok(True)


@endpoint(Dialect.RAGFLOW, contract=Contract("List an agent's published versions", response=list[VersionOut], tags=_TAGS))
async def list_versions(request: web.Request) -> web.Response:
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    versions = (await orch.unary(orch.agents.ListVersions, agent_pb.ListVersionsRequest(tenant_id=tenant, agent_id=agent_id))).versions
    return ok([version_view(v) for v in versions], total=len(versions))


@endpoint(Dialect.RAGFLOW, contract=Contract("Publish the draft as a new version", body=PublishBody, response=VersionOut,
                                             tags=_TAGS))
async def publish_version(request: web.Request) -> web.Response:
    req_body = await body(request)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    return ok(version_view(await _publish(orch, tenant, agent_id, req_body.title or "")))


async def _version(request: web.Request, method_name: str, req: object) -> object:
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    try:
        return await orch.unary(getattr(orch.agents, method_name), req)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise GatewayError("Version not found.", code=grpc.StatusCode.NOT_FOUND) from None


@endpoint(Dialect.RAGFLOW, contract=Contract("Get a published version", response=VersionOut, tags=_TAGS))
async def get_version(request: web.Request) -> web.Response:
    req = agent_pb.GetVersionRequest(tenant_id=request[TENANT], agent_id=request.match_info["agent_id"],
                                     version_id=request.match_info["version_id"])
    return ok(version_view((await _version(request, "GetVersion", req)).version))


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete a published version", response=bool, tags=_TAGS))
async def delete_version(request: web.Request) -> web.Response:
    req = agent_pb.DeleteVersionRequest(tenant_id=request[TENANT], agent_id=request.match_info["agent_id"],
                                        version_id=request.match_info["version_id"])
    await _version(request, "DeleteVersion", req)
    return ok(True)


@endpoint(Dialect.RAGFLOW, contract=Contract("A run's tool calls and thoughts", response=RunLogOut, tags=_TAGS))
async def run_log(request: web.Request) -> web.Response:
    """RAGFlow's /agents/{id}/logs/{message_id}: the run's tool calls (its shape) plus status and Agent
    thoughts; `{}` for a run it does not know, as RAGFlow answers."""
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    req = canvas_pb.GetRunLogRequest(tenant_id=tenant, run_id=request.match_info["message_id"], agent_id=agent_id)
    try:
        log = await orch.unary(orch.canvas.GetRunLog, req)
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            raise
        return ok({})
    return ok({"message_id": log.run_id, "session_id": log.session_id, "status": log.status, "error": log.error or None,
               "started_at": log.started_at, "finished_at": log.finished_at or None,
               "logs": json.loads(log.tool_calls_json or "[]"), "thoughts": json.loads(log.thoughts_json or "[]")})


# What the Agent node uses when a canvas author's system prompt carries no tag of that name (RAGFlow's
# /agents/prompts gives its defaults to the editor). Trellis's Agent calls tools natively, so RAGFlow's
# text-protocol prompts (task analysis, plan generation, reflection) have no default here; the citation
# rules are the orchestrator's CITATION_PROMPT (services/orchestrator/components/_llm.py; a test keeps the two equal).
CITATION_GUIDELINES = """
# Citations
The retrieved content comes in blocks that start with "ID: i". Cite the blocks your answer relies on.
- Format: [ID:i], with i the block's ID; several sources as [ID:i] [ID:j], never [ID:i, ID:j].
- Put the citations at the end of the sentence they support, before its final punctuation.
- At most 4 citations per sentence; cite only IDs that appear in the retrieved content, never invent one.
- Cite facts taken from the retrieved content: numbers, dates, definitions, causes, comparisons, quotes,
  predictions and disputed claims. Do not cite common knowledge, transitions, or your own reasoning.
- Do not change the wording of what you write to fit a citation, and use no other markup (no ~~).
"""
_DB_FIELDS = ("db_type", "database", "username", "host", "port", "password")
_RERUN_FIELDS = ("id", "dsl", "component_id")


async def _required(request: web.Request, fields: tuple[str, ...]) -> dict:
    """RAGFlow's validate_request: code 101 "required argument are missing: a,b; " naming each absent key."""
    raw = await read_json(request)
    missing = [f for f in fields if f not in raw]
    if missing:
        raise GatewayError(f"required argument are missing: {','.join(missing)}; ", param=missing[0])
    return raw


@endpoint(Dialect.RAGFLOW, contract=Contract("The Agent node's default prompt sections", response=dict[str, str],
                                             tags=_TAGS))
async def agent_prompts(request: web.Request) -> web.Response:
    return ok({"task_analysis": "", "plan_generation": "", "reflection": "", "citation_guidelines": CITATION_GUIDELINES})


@endpoint(Dialect.RAGFLOW, contract=Contract("Agent templates (Trellis ships none)", response=list[dict], tags=_TAGS))
async def agent_templates(request: web.Request) -> web.Response:
    return ok([])


@endpoint(Dialect.RAGFLOW, contract=Contract("Test an ExeSQL database connection (checked when an ExeSQL node runs)",
                                             response=None, tags=_TAGS))
async def test_db_connection(request: web.Request) -> web.Response:
    """RAGFlow's required fields (101); a complete request gets 102: Trellis connects to a database only from
    the orchestrator, when an ExeSQL node runs, through its egress guard; the gateway opens no connection."""
    await _required(request, _DB_FIELDS)
    raise GatewayError("Trellis tests a database connection when an ExeSQL node runs; the gateway connects to "
                       "no database", code=grpc.StatusCode.NOT_FOUND)


@endpoint(Dialect.RAGFLOW, contract=Contract("Rerun an ingestion pipeline from a component", response=None, tags=_TAGS))
async def rerun_agent(request: web.Request) -> web.Response:
    """RAGFlow's required fields (101); `id` names an ingestion-pipeline log, which Trellis keeps none of,
    so a complete request gets RAGFlow's answer for a log it cannot find: 102 "Document not found."."""
    await _required(request, _RERUN_FIELDS)
    raise GatewayError("Document not found.", code=grpc.StatusCode.NOT_FOUND)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/agents/prompts", agent_prompts)  # before /agents/{agent_id}
    r.add_get("/api/v1/agents/templates", agent_templates)
    r.add_post("/api/v1/agents/test_db_connection", test_db_connection)
    r.add_post("/api/v1/agents/rerun", rerun_agent)
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
