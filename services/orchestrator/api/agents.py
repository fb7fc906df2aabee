"""AgentService: a tenant's agents and their published versions (store/agents.py)."""

from __future__ import annotations

from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc

from services.orchestrator.api.convert import agent_to_proto, version_to_proto
from services.orchestrator.api.requests import tenant_of as _tenant
from services.orchestrator.engine import canvases
from services.orchestrator.store import AgentStore, SessionStore


class AgentServicer(agent_grpc.AgentServiceServicer):
    def __init__(self, agents: AgentStore, sessions: SessionStore) -> None:
        self.agents = agents
        self.sessions = sessions

    async def CreateAgent(self, request, context):
        canvases.parse(request.dsl_json, require_available=False)
        agent = await self.agents.create(
            _tenant(request), title=request.title, dsl_json=request.dsl_json, description=request.description,
            canvas_type=request.canvas_type, canvas_category=request.canvas_category)
        return agent_pb.CreateAgentResponse(agent=agent_to_proto(agent))

    async def GetAgent(self, request, context):
        return agent_pb.GetAgentResponse(agent=agent_to_proto(await self.agents.get(_tenant(request), request.agent_id)))

    async def ListAgents(self, request, context):
        agents, total = await self.agents.list(
            _tenant(request), page=request.page or 1, page_size=request.page_size or 30,
            orderby=request.orderby or "update_time", desc=request.desc, keywords=request.keywords)
        return agent_pb.ListAgentsResponse(
            agents=[agent_to_proto(a, include_dsl=request.include_dsl) for a in agents], total=total)

    async def UpdateAgent(self, request, context):
        changes = {f: getattr(request, f) if request.HasField(f) else None
                   for f in ("title", "description", "dsl_json", "canvas_type", "canvas_category")}
        if changes["dsl_json"] is not None:
            canvases.parse(changes["dsl_json"], require_available=False)
        agent = await self.agents.update(_tenant(request), request.agent_id, **changes)
        return agent_pb.UpdateAgentResponse(agent=agent_to_proto(agent))

    async def DeleteAgent(self, request, context):
        await self.agents.delete(_tenant(request), request.agent_id)
        await self.sessions.delete_for_agent(request.tenant_id, request.agent_id)  # no orphans left behind
        return agent_pb.DeleteAgentResponse()

    async def PublishVersion(self, request, context):
        version = await self.agents.publish(_tenant(request), request.agent_id, request.title)
        return agent_pb.PublishVersionResponse(version=version_to_proto(version))

    async def ListVersions(self, request, context):
        versions = await self.agents.list_versions(_tenant(request), request.agent_id)
        return agent_pb.ListVersionsResponse(versions=[version_to_proto(v, include_dsl=False) for v in versions])

    async def GetVersion(self, request, context):
        version = await self.agents.get_version(_tenant(request), request.agent_id, request.version_id)
        return agent_pb.GetVersionResponse(version=version_to_proto(version))

    async def DeleteVersion(self, request, context):
        await self.agents.delete_version(_tenant(request), request.agent_id, request.version_id)
        return agent_pb.DeleteVersionResponse()
