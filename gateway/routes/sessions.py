"""RAGFlow's agent sessions: /api/v1/agents/{agent_id}/sessions[/{session_id}].

A session created here has source "agent" and starts with the Begin prologue; it runs the draft unless
`release` (latest published version) or `version_id` says otherwise. `user_id` defaults to the tenant, as
RAGFlow does; sessions of different users never share history (the orchestrator keeps them apart).
"""

from __future__ import annotations

import grpc
from aiohttp import web
from trellis.canvas.v1 import session_service_pb2 as session_pb

from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR
from gateway.protocol import CreateSessionBody, DeleteSessionsBody, query_bool, query_int, read_body, truthy
from gateway.routes._runs import load_session
from gateway.routes._views import ok, session_view


@endpoint(Dialect.RAGFLOW)
async def create_session(request: web.Request) -> web.Response:
    body = await read_body(request, CreateSessionBody)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    release = truthy(body.release if body.release is not None else request.query.get("release"))
    req = session_pb.CreateSessionRequest(
        tenant_id=tenant, agent_id=agent_id, user_id=body.user_id or request.query.get("user_id") or tenant,
        name=body.name or "", version_id=body.version_id or "", draft=not (release or body.version_id))
    session = (await orch.unary(orch.sessions.CreateSession, req)).session
    return ok(session_view(session, messages_key="message"))


@endpoint(Dialect.RAGFLOW)
async def list_sessions(request: web.Request) -> web.Response:
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    if session_id := request.query.get("id"):
        session = await load_session(orch, tenant, agent_id, session_id)
        return ok([session_view(session)], total=1)
    req = session_pb.ListSessionsRequest(
        tenant_id=tenant, agent_id=agent_id, user_id=request.query.get("user_id", ""),
        page=query_int(request, "page", 1), page_size=query_int(request, "page_size", 30),
        desc=query_bool(request, "desc", True))
    resp = await orch.unary(orch.sessions.ListSessions, req)
    return ok([session_view(s) for s in resp.sessions], total=resp.total)


@endpoint(Dialect.RAGFLOW)
async def get_session(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    session = await load_session(orch, tenant, request.match_info["agent_id"], request.match_info["session_id"])
    return ok(session_view(session))


@endpoint(Dialect.RAGFLOW)
async def delete_session(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    session = await load_session(orch, tenant, request.match_info["agent_id"], request.match_info["session_id"])
    await orch.unary(orch.sessions.DeleteSession, session_pb.DeleteSessionRequest(tenant_id=tenant, session_id=session.id))
    return ok(True)


@endpoint(Dialect.RAGFLOW)
async def delete_sessions(request: web.Request) -> web.Response:
    """`{"ids": [...]}` or `{"delete_all": true}`; deleting everything is never implied by a missing list."""
    body = await read_body(request, DeleteSessionsBody)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    if body.delete_all:
        ids: list[str] = []
        page = 1
        while True:
            resp = await orch.unary(orch.sessions.ListSessions, session_pb.ListSessionsRequest(
                tenant_id=tenant, agent_id=agent_id, page=page, page_size=100))
            ids += [s.id for s in resp.sessions]
            if not resp.sessions or len(ids) >= resp.total:
                break
            page += 1
    elif body.ids:
        ids = list(dict.fromkeys(body.ids))
    else:
        raise GatewayError("invalid request body: give `ids` (a list of session ids) or `delete_all: true`", param="ids")
    errors: list[str] = []
    for session_id in ids:
        try:
            await load_session(orch, tenant, agent_id, session_id)
            req = session_pb.DeleteSessionRequest(tenant_id=tenant, session_id=session_id)
            await orch.unary(orch.sessions.DeleteSession, req)
        except GatewayError as err:
            errors.append(f"{session_id}: {err.message}")
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise
            errors.append(f"{session_id}: {exc.details()}")
    deleted = len(ids) - len(errors)
    if errors and not deleted:
        raise GatewayError("; ".join(errors), code=grpc.StatusCode.NOT_FOUND)
    if errors:
        message = f"Partially deleted {deleted} sessions with {len(errors)} errors"
        return ok({"success_count": deleted, "errors": errors}, message=message)
    return ok(True)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/v1/agents/{agent_id}/sessions", create_session)
    r.add_get("/api/v1/agents/{agent_id}/sessions", list_sessions)
    r.add_delete("/api/v1/agents/{agent_id}/sessions", delete_sessions)
    r.add_get("/api/v1/agents/{agent_id}/sessions/{session_id}", get_session)
    r.add_delete("/api/v1/agents/{agent_id}/sessions/{session_id}", delete_session)
