"""An agent called as a service, the part the MCP and A2A doors share (gateway/mcp_server/, gateway/a2a/): the
tenant's agents with the inputs their Begin declares, the run request of one call (a new session, or the one the
caller continues), and what a run's events come to (`RunOutcome`: the answer, its references, the form a
UserFillUp waits on, how it ended).

    agents = await tenant_agents(orch, tenant, published_only=True)
    req = await call_request(orch, tenant, agent_id, query="hi", inputs={}, session_id="")
    outcome = RunOutcome()
    async with orch.run(req) as events:
        async for ev in events:
            outcome.feed(ev)        # outcome.text, .references, .waiting, .form, .error
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import grpc
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import events_pb2

from gateway.dialects._common import loads, run_failed
from gateway.errors import GatewayError, from_rpc_error
from gateway.orchestrator import Orchestrator
from gateway.routes._runs import agent_target, json_field, load_session, session_target

PAGE = 100


@dataclass(frozen=True)
class CallableAgent:
    """A stored agent and the inputs its Begin declares ({key: {name, type, optional, options, value}})."""

    agent: agent_pb.Agent
    inputs: dict[str, Any]


async def tenant_agents(orch: Orchestrator, tenant: str, *, published_only: bool) -> list[CallableAgent]:
    """Every agent of `tenant` (only those with a published version when `published_only`), oldest first, with
    the Begin inputs of the version a call runs: the latest published one, else the draft."""
    found: list[agent_pb.Agent] = []
    page = 1
    while True:
        resp = await orch.unary(orch.agents.ListAgents, agent_pb.ListAgentsRequest(
            tenant_id=tenant, page=page, page_size=PAGE, orderby="create_time", desc=False, include_dsl=True))
        found += resp.agents
        if not resp.agents or len(found) >= resp.total:
            break
        page += 1
    if published_only:
        found = [a for a in found if a.latest_version_id]
    return list(await asyncio.gather(*(_with_inputs(orch, a) for a in found)))


async def one_agent(orch: Orchestrator, tenant: str, agent_id: str) -> CallableAgent:
    """The tenant's agent `agent_id` (another tenant's is NOT_FOUND, as a missing one)."""
    resp = await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=agent_id))
    return await _with_inputs(orch, resp.agent)


async def find_agent(orch: Orchestrator, tenant: str, agent_id: str) -> agent_pb.Agent | None:
    """The tenant's agent `agent_id`, None when it has none such (also an id the orchestrator refuses); an
    orchestrator failure is a GatewayError."""
    try:
        return (await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=agent_id))).agent
    except grpc.aio.AioRpcError as exc:
        if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            return None
        raise from_rpc_error(exc) from None


async def _with_inputs(orch: Orchestrator, agent: agent_pb.Agent) -> CallableAgent:
    dsl = agent.dsl_json
    if agent.latest_version_id:
        version = await orch.unary(orch.agents.GetVersion, agent_pb.GetVersionRequest(
            tenant_id=agent.tenant_id, agent_id=agent.id, version_id=agent.latest_version_id))
        dsl = version.version.dsl_json or dsl
    return CallableAgent(agent, begin_inputs(dsl))


def begin_inputs(dsl_json: str) -> dict[str, Any]:
    """The `inputs` of the canvas's Begin, in RAGFlow's DSL (v1, a template wrapper too) or Trellis's v2."""
    try:
        dsl = json.loads(dsl_json) if dsl_json else {}
    except json.JSONDecodeError:
        return {}
    if isinstance(dsl, dict) and isinstance(dsl.get("dsl"), dict):
        dsl = dsl["dsl"]
    components = dsl.get("components") if isinstance(dsl, dict) else None
    begin = components.get("begin") if isinstance(components, dict) else None
    if not isinstance(begin, dict):
        return {}
    params = (begin.get("obj") or {}).get("params") if isinstance(begin.get("obj"), dict) else begin.get("params")
    inputs = params.get("inputs") if isinstance(params, dict) else None
    return {str(k): v for k, v in inputs.items() if isinstance(v, dict)} if isinstance(inputs, dict) else {}


async def call_request(orch: Orchestrator, tenant: str, agent_id: str, *, query: str, inputs: dict[str, Any],
                       session_id: str = "", continue_on_disconnect: bool = False,
                       api_key_id: str = "") -> canvas_pb.RunRequest:
    """The run of one call: on `session_id` (which must be the tenant's session of this agent), else on a new
    session made as CreateSession makes one, running the latest published version (the draft if none).
    `api_key_id`: the caller's key's (gateway/auth.py), whose own limits apply too."""
    if session_id:
        session = await load_session(orch, tenant, agent_id, session_id)
        req = canvas_pb.RunRequest(agent=session_target(session), session_id=session.id, user_id=session.user_id or tenant)
    else:
        req = canvas_pb.RunRequest(agent=agent_target(agent_id), create_session=True, user_id=tenant)
    req.tenant_id, req.query, req.inputs_json = tenant, query, json_field(inputs)
    req.continue_on_disconnect = continue_on_disconnect
    req.api_key_id = api_key_id
    return req


@dataclass
class RunOutcome:
    """What a run's events come to, fed one at a time."""

    run_id: str = ""
    session_id: str = ""
    answer: list[str] = field(default_factory=list)
    references: list[Any] = field(default_factory=list)
    form: dict[str, Any] | None = None  # the inputs a UserFillUp waits for, {field: spec}
    tips: str = ""
    waiting_component: str = ""
    finished: events_pb2.RunFinished | None = None
    failure: GatewayError | None = None  # the run's RunError

    @property
    def text(self) -> str:
        return "".join(self.answer)

    @property
    def waiting(self) -> bool:
        return self.finished is not None and self.finished.waiting_for_user

    @property
    def cancelled(self) -> bool:
        return self.finished is not None and self.finished.cancelled

    @property
    def error(self) -> str:
        if self.failure is not None:
            return self.failure.message
        return self.finished.error if self.finished is not None and not self.finished.cancelled else ""

    def feed(self, ev: events_pb2.RunEvent) -> str:
        """Take one event; returns its kind."""
        self.run_id = self.run_id or ev.run_id
        self.session_id = self.session_id or ev.session_id
        kind = ev.WhichOneof("kind")
        if kind == "message_delta":
            m = ev.message_delta
            if not (m.start_to_think or m.end_to_think):
                self.answer.append(m.content)
        elif kind == "message_end":
            reference = loads(ev.message_end.reference_json, {})
            if reference:
                self.references.append(reference)
        elif kind == "user_input_required":
            self.form = loads(ev.user_input_required.inputs_json, {}) or {}
            self.tips = ev.user_input_required.tips
            self.waiting_component = ev.node_id
        elif kind == "run_finished":
            self.finished = ev.run_finished
        elif kind == "error":
            self.failure = run_failed(ev.error)
        return kind or ""
