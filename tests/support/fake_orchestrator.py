"""A scripted orchestrator for gateway tests: the real gRPC contracts, in-memory state, canned runs.

    fake = FakeOrchestrator()
    server, port = await start_server(fake.bindings())

Every store is keyed by tenant, so the gateway's tenant handling is visible. A tenant in `fake.refused` is
refused every run before its first event, as the orchestrator's admission refuses (RESOURCE_EXHAUSTED with
RetryInfo and QuotaFailure in its rich status details, RateLimit headers in its trailing metadata: `refusal`);
the query "refuse_late" is refused after the run started (a refusal reaching an open stream).
`CanvasService.Run` picks its script from the query (see `FakeCanvas.Run`), and serves the gateway's runs through the real turn server
(`FakeRunTurns`, as services/orchestrator/api/run_turns.py does); every RunRequest is kept in `fake.run_requests`.
A run that the client abandons sets `fake.run_cancelled`.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from dataclasses import dataclass, field

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from trellis.canvas.internal.v1 import run_turn_service_pb2 as turn_pb
from trellis.canvas.internal.v1 import run_turn_service_pb2_grpc as turn_grpc
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import events_pb2 as ev_pb
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc
from trellis.canvas.v1 import webhook_trigger_service_pb2 as webhook_trigger_pb
from trellis.canvas.v1 import webhook_trigger_service_pb2_grpc as webhook_trigger_grpc

from services.common.errors import AlreadyExists, InvalidArgument, NotFound, ResourceExhausted
from services.common.server import Binding
from services.common.status_details import quota_trailers
from services.common.turns import TurnServer, TurnTypes

EVENT_TIME = 1756364483  # every scripted event carries this time, so streams compare byte for byte
PROLOGUE = "Hi! I am your assistant, can I help you?"
REFERENCE = {"chunks": {"7": {"id": "c1", "content": "Trellis runs canvases.", "document_name": "doc.pdf"}},
             "doc_aggs": {"doc.pdf": {"doc_name": "doc.pdf", "doc_id": "d1", "count": 1}}}
FLOOD_DELTA = "x" * 32 * 1024


def refusal(tenant: str, limit: str, retry_after_s: float) -> ResourceExhausted:
    """The orchestrator's refusal of `tenant` over `limit`, as its admission sends it (docs/limits.md)."""
    message = f"tenant {tenant!r} is over its limit {limit}; retry after {retry_after_s:g} s"
    seconds = math.ceil(retry_after_s)
    return ResourceExhausted(message, trailing_metadata=(
        *quota_trailers(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry_after_s=retry_after_s,
                        subject=f"tenant:{tenant}", description=limit),
        ("ratelimit-policy", f'"{limit}";q=4;w=1'), ("ratelimit", f'"{limit}";r=0;t={seconds}')))


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


@dataclass
class FakeOrchestrator:
    agents: dict[tuple[str, str], agent_pb.Agent] = field(default_factory=dict)
    versions: dict[tuple[str, str], list[agent_pb.AgentVersion]] = field(default_factory=dict)
    sessions: dict[tuple[str, str], session_pb.Session] = field(default_factory=dict)
    run_requests: list[canvas_pb.RunRequest] = field(default_factory=list)
    cancel_requests: list[canvas_pb.CancelRequest] = field(default_factory=list)
    run_cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    active: dict[str, asyncio.Event] = field(default_factory=dict)  # session id -> stop signal of a running run
    flood_sent: int = 0
    refused: dict[str, float] = field(default_factory=dict)  # tenant -> the retry delay its refusals carry
    # tenant -> what GetTenantAdmission answers; a tenant not here: UNIMPLEMENTED (the gateway falls back)
    admission: dict[str, canvas_pb.GetTenantAdmissionResponse] = field(default_factory=dict)

    def bindings(self) -> list[Binding]:
        canvas = FakeCanvas(self)
        return [
            Binding(agent_grpc.add_AgentServiceServicer_to_server, FakeAgents(self), "trellis.canvas.v1.AgentService"),
            Binding(session_grpc.add_SessionServiceServicer_to_server, FakeSessions(self), "trellis.canvas.v1.SessionService"),
            Binding(canvas_grpc.add_CanvasServiceServicer_to_server, canvas, "trellis.canvas.v1.CanvasService"),
            Binding(turn_grpc.add_RunTurnServiceServicer_to_server, FakeRunTurns(canvas),
                    "trellis.canvas.internal.v1.RunTurnService"),
            Binding(webhook_trigger_grpc.add_WebhookTriggerServiceServicer_to_server, FakeWebhookTriggers(),
                    "trellis.canvas.v1.WebhookTriggerService"),
        ]

    def agent(self, tenant: str, agent_id: str) -> agent_pb.Agent:
        agent = self.agents.get((tenant, agent_id))
        if agent is None:
            raise NotFound(f"agent {agent_id!r} not found")
        return agent

    def session(self, tenant: str, session_id: str) -> session_pb.Session:
        session = self.sessions.get((tenant, session_id))
        if session is None:
            raise NotFound(f"session {session_id!r} not found")
        return session

    def add_agent(self, tenant: str, title: str = "Helper", dsl: dict | None = None) -> agent_pb.Agent:
        now = _now()
        agent = agent_pb.Agent(id=uuid.uuid4().hex, tenant_id=tenant, title=title, description="answers",
                               dsl_json=json.dumps(dsl or {"components": {"begin": {}}}), created_at=now, updated_at=now)
        self.agents[(tenant, agent.id)] = agent
        return agent

    def add_session(self, tenant: str, agent_id: str, *, user_id: str = "", source: str = "agent") -> session_pb.Session:
        now = _now()
        session = session_pb.Session(id=uuid.uuid4().hex, tenant_id=tenant, agent_id=agent_id, user_id=user_id or tenant,
                                     name="New session", source=source, created_at=now, updated_at=now)
        session.messages.add(role="assistant", content=PROLOGUE, id=uuid.uuid4().hex, created_at=now)
        self.sessions[(tenant, session.id)] = session
        return session


def _check_dsl(dsl_json: str) -> None:
    try:
        dsl = json.loads(dsl_json)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"invalid DSL: not JSON ({exc.msg})") from None
    if not isinstance(dsl, dict) or "components" not in dsl:
        raise InvalidArgument("invalid DSL: `components` is missing")
    for cid, spec in dsl["components"].items():
        if isinstance(spec, dict) and spec.get("obj", {}).get("component_name") == "Agent" \
                and not spec["obj"].get("params", {}).get("llm_id"):
            raise InvalidArgument(f"canvas is not valid: component {cid}: field `llm_id` is required")


class FakeAgents(agent_grpc.AgentServiceServicer):
    def __init__(self, state: FakeOrchestrator) -> None:
        self.s = state

    async def CreateAgent(self, request, context):
        if any(a.title == request.title for (t, _), a in self.s.agents.items() if t == request.tenant_id):
            raise AlreadyExists(f"{request.title} already exists.")
        _check_dsl(request.dsl_json)
        agent = self.s.add_agent(request.tenant_id, request.title, json.loads(request.dsl_json))
        agent.description, agent.canvas_type = request.description, request.canvas_type
        return agent_pb.CreateAgentResponse(agent=agent)

    async def GetAgent(self, request, context):
        return agent_pb.GetAgentResponse(agent=self.s.agent(request.tenant_id, request.agent_id))

    async def ListAgents(self, request, context):
        agents = [a for (t, _), a in self.s.agents.items() if t == request.tenant_id and request.keywords in a.title]
        page, size = request.page or 1, request.page_size or 30
        shown = agents[(page - 1) * size: page * size]
        if not request.include_dsl:
            shown = [agent_pb.Agent(id=a.id, tenant_id=a.tenant_id, title=a.title, created_at=a.created_at) for a in shown]
        return agent_pb.ListAgentsResponse(agents=shown, total=len(agents))

    async def UpdateAgent(self, request, context):
        agent = self.s.agent(request.tenant_id, request.agent_id)
        if request.HasField("dsl_json"):
            _check_dsl(request.dsl_json)
            agent.dsl_json = request.dsl_json
        if request.HasField("title"):
            agent.title = request.title
        if request.HasField("description"):
            agent.description = request.description
        agent.updated_at.CopyFrom(_now())
        return agent_pb.UpdateAgentResponse(agent=agent)

    async def DeleteAgent(self, request, context):
        self.s.agent(request.tenant_id, request.agent_id)
        del self.s.agents[(request.tenant_id, request.agent_id)]
        return agent_pb.DeleteAgentResponse()

    async def PublishVersion(self, request, context):
        agent = self.s.agent(request.tenant_id, request.agent_id)
        versions = self.s.versions.setdefault((request.tenant_id, agent.id), [])
        version = agent_pb.AgentVersion(id=uuid.uuid4().hex, agent_id=agent.id, number=len(versions) + 1,
                                        title=request.title or f"v{len(versions) + 1}", dsl_json=agent.dsl_json,
                                        created_at=_now())
        versions.append(version)
        agent.latest_version_id = version.id
        return agent_pb.PublishVersionResponse(version=version)

    async def ListVersions(self, request, context):
        self.s.agent(request.tenant_id, request.agent_id)
        versions = self.s.versions.get((request.tenant_id, request.agent_id), [])
        return agent_pb.ListVersionsResponse(versions=[
            agent_pb.AgentVersion(id=v.id, agent_id=v.agent_id, number=v.number, title=v.title, created_at=v.created_at)
            for v in reversed(versions)])

    async def GetVersion(self, request, context):
        for v in self.s.versions.get((request.tenant_id, request.agent_id), []):
            if v.id == request.version_id:
                return agent_pb.GetVersionResponse(version=v)
        raise NotFound(f"version {request.version_id!r} of agent {request.agent_id!r} not found")

    async def DeleteVersion(self, request, context):
        versions = self.s.versions.get((request.tenant_id, request.agent_id), [])
        for v in versions:
            if v.id == request.version_id:
                versions.remove(v)
                return agent_pb.DeleteVersionResponse()
        raise NotFound(f"version {request.version_id!r} of agent {request.agent_id!r} not found")


class FakeSessions(session_grpc.SessionServiceServicer):
    def __init__(self, state: FakeOrchestrator) -> None:
        self.s = state

    async def CreateSession(self, request, context):
        agent = self.s.agent(request.tenant_id, request.agent_id)
        session = self.s.add_session(request.tenant_id, agent.id, user_id=request.user_id)
        session.name = request.name or "New session"
        session.version_id = request.version_id or ("" if request.draft else agent.latest_version_id)
        return session_pb.CreateSessionResponse(session=session)

    async def GetSession(self, request, context):
        return session_pb.GetSessionResponse(session=self.s.session(request.tenant_id, request.session_id))

    async def ListSessions(self, request, context):
        sessions = [s for (t, _), s in self.s.sessions.items()
                    if t == request.tenant_id and s.agent_id == request.agent_id
                    and (not request.user_id or s.user_id == request.user_id)]
        page, size = request.page or 1, request.page_size or 30
        return session_pb.ListSessionsResponse(sessions=sessions[(page - 1) * size: page * size], total=len(sessions))

    async def DeleteSession(self, request, context):
        self.s.session(request.tenant_id, request.session_id)
        del self.s.sessions[(request.tenant_id, request.session_id)]
        return session_pb.DeleteSessionResponse()


class FakeCanvas(canvas_grpc.CanvasServiceServicer):
    """Scripts, by query: "explode" (RunError mid-run), "hang" (waits for cancel), "invalid" (INVALID_ARGUMENT
    before any event), "quiet" (no event), "think", "tools", "ask" (user input), "flood" (2000 x 32 KB);
    anything else: the standard answer "Hello world" with a reference."""

    def __init__(self, state: FakeOrchestrator) -> None:
        self.s = state

    async def Run(self, request, context):
        self.s.run_requests.append(request)
        tenant = request.tenant_id
        if tenant in self.s.refused:
            raise refusal(tenant, "concurrent_runs", self.s.refused[tenant])
        agent = self.s.agent(tenant, request.agent.agent_id)
        if request.query == "invalid":
            raise InvalidArgument("canvas is not valid: component Agent:A: field `llm_id` is required")
        if request.session_id:
            session = self.s.session(tenant, request.session_id)
        elif request.create_session:  # as CreateSession, in the same call
            session = self.s.add_session(tenant, agent.id, user_id=request.user_id)
            session.version_id = request.agent.version_id or ("" if request.agent.draft else agent.latest_version_id)
        else:
            session = self.s.add_session(tenant, agent.id, user_id=request.user_id, source="workflow")
        run_id = request.run_id or "run-" + uuid.uuid4().hex[:8]

        def event(node_id: str = "", **kind) -> ev_pb.RunEvent:
            e = ev_pb.RunEvent(run_id=run_id, session_id=session.id, node_id=node_id, **kind)
            e.timestamp.FromSeconds(EVENT_TIME)
            return e

        stop = self.s.active[session.id] = asyncio.Event()
        try:
            async for e in self._script(request, event, stop):
                yield e
        except asyncio.CancelledError:
            self.s.run_cancelled.set()
            raise
        finally:
            self.s.active.pop(session.id, None)

    async def _script(self, request, event, stop: asyncio.Event):
        q = request.query
        if q == "quiet":
            return
        yield event(run_started=ev_pb.RunStarted(inputs_json=request.inputs_json or "{}"))
        if q == "refuse_late":
            yield event("Agent:A", message_delta=ev_pb.MessageDelta(content="partial"))
            raise refusal(request.tenant_id, "llm_tokens_per_minute", 2.5)
        if q == "explode":
            yield event("Agent:A", message_delta=ev_pb.MessageDelta(content="partial"))
            yield event("Agent:A", error=ev_pb.RunError(message="LLM provider failed: boom", component_id="Agent:A",
                                                        code="component_failed"))
            yield event(run_finished=ev_pb.RunFinished(error="LLM provider failed: boom"))
            return
        if q == "hang":
            yield event("Agent:A", message_delta=ev_pb.MessageDelta(content="tick"))
            await stop.wait()  # until Cancel, or forever (a client disconnect cancels this RPC)
            yield event(run_finished=ev_pb.RunFinished(outputs_json='"Task has been canceled"', cancelled=True))
            return
        if q == "flood":
            for _ in range(2000):
                self.s.flood_sent += 1
                yield event("Agent:A", message_delta=ev_pb.MessageDelta(content=FLOOD_DELTA))
            yield event(run_finished=ev_pb.RunFinished(outputs_json="{}"))
            return
        yield event("begin", node_started=ev_pb.NodeStarted(component_name="begin", component_type="Begin"))
        yield event("begin", node_finished=ev_pb.NodeFinished(
            component_name="begin", component_type="Begin", inputs_json="{}",
            outputs_json='{"_created_time": 1.5, "_elapsed_time": 0.25}', elapsed_s=0.25))
        yield event("Agent:A", node_started=ev_pb.NodeStarted(component_name="Agent A", component_type="Agent"))
        if q == "think":
            yield event("Agent:A", message_delta=ev_pb.MessageDelta(start_to_think=True))
            yield event("Agent:A", message_delta=ev_pb.MessageDelta(content="pondering"))
            yield event("Agent:A", message_delta=ev_pb.MessageDelta(end_to_think=True))
        if q == "tools":
            yield event("Agent:A", tool_call_started=ev_pb.ToolCallStarted(
                call_id="call-1", tool_name="search", arguments_json='{"q": "trellis"}'))
            yield event("Agent:A", tool_call_finished=ev_pb.ToolCallFinished(
                call_id="call-1", tool_name="search", result="3 hits", elapsed_s=0.5))
        if q == "ask":
            yield event("UserFillUp:A", user_input_required=ev_pb.UserInputRequired(
                inputs_json='{"name": {"name": "Name", "type": "line", "optional": false}}', tips="What is your name?"))
            yield event(run_finished=ev_pb.RunFinished(outputs_json="{}", elapsed_s=0.5))
            return
        yield event("Agent:A", message_delta=ev_pb.MessageDelta(content="Hello"))
        yield event("Agent:A", message_delta=ev_pb.MessageDelta(content=" world"))
        yield event("Agent:A", message_end=ev_pb.MessageEnd(reference_json=json.dumps(REFERENCE)))
        yield event("Agent:A", node_finished=ev_pb.NodeFinished(
            component_name="Agent A", component_type="Agent", inputs_json='{"query": "hi"}',
            outputs_json='{"content": "Hello world", "structured": {"answer": 42}}', elapsed_s=0.5))
        yield event("Switch:B", node_finished=ev_pb.NodeFinished(component_name="Switch B", component_type="Switch",
                                                                  skipped=True))
        yield event(run_finished=ev_pb.RunFinished(
            outputs_json='{"content": "Hello world"}', elapsed_s=0.75,
            usage=ev_pb.Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7, calls=1)))

    async def Cancel(self, request, context):
        self.s.cancel_requests.append(request)
        stop = self.s.active.get(request.session_id)
        if stop is None or (request.tenant_id, request.session_id) not in self.s.sessions:
            return canvas_pb.CancelResponse(cancelled=False)
        stop.set()
        return canvas_pb.CancelResponse(cancelled=True)

    async def Validate(self, request, context):
        _check_dsl(request.dsl_json)
        return canvas_pb.ValidateResponse(valid=True)

    async def GetTenantAdmission(self, request, context):
        found = self.s.admission.get(request.tenant_id)
        if found is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no admission figures scripted for this tenant")
        return found


class FakeRunTurns(turn_grpc.RunTurnServiceServicer):
    """The gateway's runs as turns on shared streams, each one `FakeCanvas.Run`."""

    def __init__(self, canvas: FakeCanvas) -> None:
        self.canvas = canvas
        self.turns = TurnServer(TurnTypes(turn_pb.RunTurnsResponse, turn_pb.RunTurnMessage, turn_pb.RunTurnEnd),
                                self._turn, lambda turn: "/trellis.canvas.v1.CanvasService/Run", service="orchestrator",
                                shutting_down="the orchestrator is shutting down")

    async def RunTurns(self, requests, context):
        async for response in self.turns.serve(requests):
            yield response

    async def _turn(self, turn, send) -> None:
        async for event in self.canvas.Run(turn.request, None):
            await send(event)


class FakeWebhookTriggers(webhook_trigger_grpc.WebhookTriggerServiceServicer):
    """A webhook's own rate limit (RAGFlow's token bucket) always has room here."""

    async def TakeWebhookRequest(self, request, context):
        return webhook_trigger_pb.TakeWebhookRequestResponse(allowed=True)
