"""SessionService: a tenant's conversations with its agents (store/sessions.py)."""

from __future__ import annotations

from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc

from services.orchestrator.api.convert import session_to_proto
from services.orchestrator.api.requests import tenant_of as _tenant
from services.orchestrator.engine import canvases
from services.orchestrator.store import AgentStore, SessionStore
from services.orchestrator.store.sessions import message


class SessionServicer(session_grpc.SessionServiceServicer):
    def __init__(self, agents: AgentStore, sessions: SessionStore) -> None:
        self.agents = agents
        self.sessions = sessions

    async def CreateSession(self, request, context):
        tenant = _tenant(request)
        dsl_json, version_id = await self.agents.resolve_dsl(
            tenant, request.agent_id, version_id=request.version_id, draft=request.draft)
        greeting = canvases.prologue(canvases.session_canvas(tenant, request.agent_id, version_id, dsl_json))
        session = await self.sessions.create(
            tenant, agent_id=request.agent_id, user_id=request.user_id, name=request.name, version_id=version_id,
            source="agent", messages=[message("assistant", greeting)])  # RAGFlow's, an empty greeting too
        return session_pb.CreateSessionResponse(session=session_to_proto(session))

    async def GetSession(self, request, context):
        return session_pb.GetSessionResponse(session=session_to_proto(await self.sessions.get(_tenant(request), request.session_id)))

    async def ListSessions(self, request, context):
        sessions, total = await self.sessions.list(
            _tenant(request), request.agent_id, user_id=request.user_id, page=request.page or 1,
            page_size=request.page_size or 30, desc=request.desc)
        return session_pb.ListSessionsResponse(sessions=[session_to_proto(s) for s in sessions], total=total)

    async def DeleteSession(self, request, context):
        await self.sessions.delete(_tenant(request), request.session_id)
        return session_pb.DeleteSessionResponse()
