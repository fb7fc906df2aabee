"""gRPC servicers of the orchestrator: thin adapters between protobuf and the domain."""

from __future__ import annotations

from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc

from services.common.errors import not_yet

_PERSISTENCE = "issue 5 (edge gateway and persistence)"


class AgentServicer(agent_grpc.AgentServiceServicer):
    async def CreateAgent(self, request, context):
        raise not_yet("AgentService.CreateAgent", _PERSISTENCE)

    async def GetAgent(self, request, context):
        raise not_yet("AgentService.GetAgent", _PERSISTENCE)

    async def ListAgents(self, request, context):
        raise not_yet("AgentService.ListAgents", _PERSISTENCE)

    async def UpdateAgent(self, request, context):
        raise not_yet("AgentService.UpdateAgent", _PERSISTENCE)

    async def DeleteAgent(self, request, context):
        raise not_yet("AgentService.DeleteAgent", _PERSISTENCE)

    async def PublishVersion(self, request, context):
        raise not_yet("AgentService.PublishVersion", _PERSISTENCE)

    async def ListVersions(self, request, context):
        raise not_yet("AgentService.ListVersions", _PERSISTENCE)

    async def GetVersion(self, request, context):
        raise not_yet("AgentService.GetVersion", _PERSISTENCE)

    async def DeleteVersion(self, request, context):
        raise not_yet("AgentService.DeleteVersion", _PERSISTENCE)


class SessionServicer(session_grpc.SessionServiceServicer):
    async def CreateSession(self, request, context):
        raise not_yet("SessionService.CreateSession", _PERSISTENCE)

    async def GetSession(self, request, context):
        raise not_yet("SessionService.GetSession", _PERSISTENCE)

    async def ListSessions(self, request, context):
        raise not_yet("SessionService.ListSessions", _PERSISTENCE)

    async def DeleteSession(self, request, context):
        raise not_yet("SessionService.DeleteSession", _PERSISTENCE)


_ENGINE = "issue 3 (canvas engine)"


class CanvasServicer(canvas_grpc.CanvasServiceServicer):
    async def Run(self, request, context):
        raise not_yet("CanvasService.Run", _ENGINE)
        yield  # pragma: no cover  (makes this an async generator, as the streaming RPC expects)

    async def Cancel(self, request, context):
        raise not_yet("CanvasService.Cancel", _ENGINE)

    async def Validate(self, request, context):
        raise not_yet("CanvasService.Validate", _ENGINE)
