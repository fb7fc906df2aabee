"""gRPC servicers of the orchestrator: thin adapters between protobuf and the domain (stores, runs)."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc

from services.common.errors import DeadlineExceeded, InvalidArgument
from services.common.turn_server import Send, TurnServer, TurnTypes
from services.orchestrator import canvases
from services.orchestrator.convert import (
    agent_to_proto,
    event_to_proto,
    issues_to_proto,
    run_info_to_proto,
    run_log_to_proto,
    run_spec_from_proto,
    session_to_proto,
    version_to_proto,
)
from services.orchestrator.dsl import DslError, ValidationIssue, load_canvas
from services.orchestrator.run_manager import RunManager
from services.orchestrator.store import AgentStore, SessionStore
from services.orchestrator.store.sessions import message
from services.orchestrator.validate import validate


SERVICE_LABEL = "orchestrator"  # the `service` of its metrics (its server's name), for the turns it counts as Run calls
RUN_METHOD = "/trellis.canvas.v1.CanvasService/Run"
_TURN_TYPES = TurnTypes(canvas_pb.RunTurnsResponse, canvas_pb.RunTurnMessage, canvas_pb.RunTurnEnd)


def _tenant(request) -> str:
    if not request.tenant_id:
        raise InvalidArgument("tenant_id is required")
    return request.tenant_id


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


class CanvasServicer(canvas_grpc.CanvasServiceServicer):
    def __init__(self, runs: RunManager) -> None:
        self.runs = runs
        # RunTurns' streams (`turns.drain` on shutdown): each turn as a Run call.
        self.turns = TurnServer(_TURN_TYPES, self._turn, lambda turn: RUN_METHOD, service=SERVICE_LABEL,
                                shutting_down="the orchestrator is shutting down")

    async def Run(self, request, context):
        # Answer deltas produced while the previous event is being written go out as one event (RunManager.execute).
        async for event in self.runs.execute(run_spec_from_proto(request)):
            yield event_to_proto(event)

    async def RunTurns(self, requests, context):
        async for response in self.turns.serve(requests):
            yield response

    async def _turn(self, turn: canvas_pb.RunTurn, send: Send) -> None:
        """One Run turn: its events, as Run streams them; past its deadline, cancelled as a Run call would be."""
        deadline = asyncio.timeout(turn.timeout_s or None)
        try:
            async with deadline:
                async with aclosing(self.runs.execute(run_spec_from_proto(turn.request))) as events:
                    async for event in events:
                        await send(event_to_proto(event))
        except TimeoutError:
            if deadline.expired():
                raise DeadlineExceeded("Deadline Exceeded") from None
            raise

    async def Cancel(self, request, context):
        target = request.WhichOneof("target")
        if target is None:
            raise InvalidArgument("run_id or session_id is required")
        cancelled = await self.runs.cancel(_tenant(request), run_id=request.run_id, session_id=request.session_id)
        return canvas_pb.CancelResponse(cancelled=cancelled)

    async def WatchRun(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        async for event in self.runs.watch(_tenant(request), request.run_id, request.after_seq):
            yield event

    async def GetRun(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        info, path = await self.runs.get_run(_tenant(request), request.run_id, request.agent_id)
        return canvas_pb.GetRunResponse(run=run_info_to_proto(request.run_id, info, path))

    async def ListRuns(self, request, context):
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        runs = await self.runs.list_runs(_tenant(request), request.session_id, request.agent_id)
        return canvas_pb.ListRunsResponse(runs=[run_info_to_proto(run_id, info, []) for run_id, info in runs])

    async def GetRunLog(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        info, tool_calls, thoughts = await self.runs.run_log(_tenant(request), request.run_id, request.agent_id)
        return run_log_to_proto(request.run_id, info, tool_calls, thoughts)

    async def Validate(self, request, context):
        if not request.dsl_json.strip():
            raise InvalidArgument("dsl_json is required")
        try:
            canvas = load_canvas(request.dsl_json)
        except DslError as exc:
            return issues_to_proto([ValidationIssue("", exc.where, str(exc).split(": ", 1)[-1])])
        return issues_to_proto(validate(canvas))
