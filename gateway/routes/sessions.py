"""RAGFlow's agent sessions: /api/v1/agents/{agent_id}/sessions[/{session_id}].

A session created here has source "agent" and starts with the Begin prologue; it runs the draft unless
`release` (latest published version) or `version_id` says otherwise. `user_id` defaults to the tenant, as
RAGFlow does; sessions of different users never share history (the orchestrator keeps them apart).
Codes and messages are RAGFlow's: 103 for an agent the key cannot reach, 102 "Session not found!".
"""

from __future__ import annotations

import grpc
from aiohttp import web
from trellis.canvas.v1 import session_service_pb2 as session_pb

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR
from gateway.protocol import CreateSessionBody, DeleteSessionsBody, truthy
from gateway.ragflow_models import ListSessionsQuery
from gateway.responses import PartialDelete, SessionOut
from gateway.routes._runs import load_session
from gateway.routes._views import ok, session_view
from gateway.routes.agents import accessible

_TAGS = ("sessions",)


async def _session_of(request: web.Request) -> session_pb.Session:
    """The session in the path; 102 "Session not found!" when it is not this agent's (as RAGFlow)."""
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    try:
        return await load_session(orch, tenant, agent_id, request.match_info["session_id"])
    except GatewayError as err:
        raise GatewayError("Session not found!", code=grpc.StatusCode.NOT_FOUND) from err


@endpoint(Dialect.RAGFLOW, contract=Contract("Create a session", body=CreateSessionBody, response=SessionOut, tags=_TAGS))
async def create_session(request: web.Request) -> web.Response:
    req_body = await body(request)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id)
    release = truthy(req_body.release if req_body.release is not None else request.query.get("release"))
    req = session_pb.CreateSessionRequest(
        tenant_id=tenant, agent_id=agent_id, user_id=req_body.user_id or request.query.get("user_id") or tenant,
        name=req_body.name or "", version_id=req_body.version_id or "", draft=not (release or req_body.version_id))
    session = (await orch.unary(orch.sessions.CreateSession, req)).session
    return ok(session_view(session))


@endpoint(Dialect.RAGFLOW, contract=Contract("List sessions", query=ListSessionsQuery, response=list[SessionOut],
                                             tags=_TAGS))
async def list_sessions(request: web.Request) -> web.Response:
    orch, tenant, agent_id, q = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"], query(request)
    await accessible(orch, tenant, agent_id)
    if q.id:
        try:
            sessions = [await load_session(orch, tenant, agent_id, q.id)]
        except GatewayError:
            sessions = []
        return ok([session_view(s) for s in sessions], total=len(sessions))
    req = session_pb.ListSessionsRequest(tenant_id=tenant, agent_id=agent_id, user_id=q.user_id or "", page=q.page,
                                         page_size=q.page_size, desc=q.desc)
    resp = await orch.unary(orch.sessions.ListSessions, req)
    return ok([session_view(s) for s in resp.sessions], total=resp.total)


@endpoint(Dialect.RAGFLOW, contract=Contract("Get a session", response=SessionOut, tags=_TAGS))
async def get_session(request: web.Request) -> web.Response:
    return ok(session_view(await _session_of(request)))


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete a session", response=bool, tags=_TAGS))
async def delete_session(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    session = await _session_of(request)
    await orch.unary(orch.sessions.DeleteSession, session_pb.DeleteSessionRequest(tenant_id=tenant, session_id=session.id))
    return ok(True)


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete sessions", body=DeleteSessionsBody, response=PartialDelete | None,
                                             tags=_TAGS))
async def delete_sessions(request: web.Request) -> web.Response:
    """`{"ids": [...]}` or `{"delete_all": true}`; with neither, nothing is deleted and the answer is success
    (RAGFlow). An id the agent does not own is an error; duplicates are reported, once deleted."""
    req_body = await body(request)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    await accessible(orch, tenant, agent_id, f"You don't own the agent {agent_id}")
    duplicates: list[str] = []
    if req_body.ids:
        ids = list(dict.fromkeys(req_body.ids))
        duplicates = [f"Duplicate session ids: {i}" for i in ids if req_body.ids.count(i) > 1]
    elif req_body.delete_all is True:
        ids = []
        page = 1
        while True:
            resp = await orch.unary(orch.sessions.ListSessions, session_pb.ListSessionsRequest(
                tenant_id=tenant, agent_id=agent_id, page=page, page_size=100))
            ids += [s.id for s in resp.sessions]
            if not resp.sessions or len(ids) >= resp.total:
                break
            page += 1
    else:
        return ok(None)
    errors: list[str] = []
    for session_id in ids:
        try:
            await load_session(orch, tenant, agent_id, session_id)
            await orch.unary(orch.sessions.DeleteSession, session_pb.DeleteSessionRequest(tenant_id=tenant, session_id=session_id))
        except GatewayError:
            errors.append(f"The agent doesn't own the session {session_id}")
    deleted = len(ids) - len(errors)
    problems = errors or duplicates
    if problems and not deleted:
        raise GatewayError("; ".join(problems), code=grpc.StatusCode.NOT_FOUND)
    if problems:
        message = f"Partially deleted {deleted} sessions with {len(problems)} errors"
        return ok({"success_count": deleted, "errors": problems}, message=message)
    return ok(None)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/v1/agents/{agent_id}/sessions", create_session)
    r.add_get("/api/v1/agents/{agent_id}/sessions", list_sessions)
    r.add_delete("/api/v1/agents/{agent_id}/sessions", delete_sessions)
    r.add_get("/api/v1/agents/{agent_id}/sessions/{session_id}", get_session)
    r.add_delete("/api/v1/agents/{agent_id}/sessions/{session_id}", delete_session)
