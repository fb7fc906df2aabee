"""Agent cards: one per agent (its JSON-RPC endpoint `/a2a/{agent_id}`, both protocol versions it speaks, Bearer
auth), and the root card at `/.well-known/agent-card.json`, which lists the caller's published agents as skills
(no key: none), each skill naming its agent's endpoint and card."""

from __future__ import annotations

from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0
from trellis.canvas.v1 import agent_service_pb2 as agent_pb

from gateway.agent_calls import tenant_agents
from gateway.orchestrator import Orchestrator

_MODES_IN = ["text/plain", "application/json"]
_MODES_OUT = ["text/plain"]


def _security() -> dict[str, Any]:
    scheme = a2a.SecurityScheme(http_auth_security_scheme=a2a.HTTPAuthSecurityScheme(
        scheme="bearer", description="the tenant's Trellis API key"))
    return {"security_schemes": {"bearer": scheme},
            "security_requirements": [a2a.SecurityRequirement(schemes={"bearer": a2a.StringList()})]}


def endpoint_url(base_url: str, agent_id: str) -> str:
    return f"{base_url}/a2a/{agent_id}"


def card_of(agent: agent_pb.Agent, base_url: str) -> a2a.AgentCard:
    url = endpoint_url(base_url, agent.id)
    return a2a.AgentCard(
        name=agent.title or agent.id, description=agent.description or f"The Trellis agent {agent.title!r}.",
        supported_interfaces=[
            a2a.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0),
            a2a.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_0_3)],
        provider=a2a.AgentProvider(organization="Trellis", url=base_url), version=agent.latest_version_id or "draft",
        capabilities=a2a.AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=False),
        default_input_modes=_MODES_IN, default_output_modes=_MODES_OUT,
        skills=[a2a.AgentSkill(id=agent.id, name=agent.title or agent.id, description=agent.description or agent.title,
                               tags=["trellis-agent"], input_modes=_MODES_IN, output_modes=_MODES_OUT)],
        **_security())


async def agent_card(orch: Orchestrator, tenant: str, agent_id: str, base_url: str) -> a2a.AgentCard:
    resp = await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=agent_id))
    return card_of(resp.agent, base_url)


async def root_card(orch: Orchestrator, tenant: str | None, base_url: str) -> a2a.AgentCard:
    skills = []
    if tenant is not None:
        for a in await tenant_agents(orch, tenant, published_only=True):
            url = endpoint_url(base_url, a.agent.id)
            skills.append(a2a.AgentSkill(
                id=a.agent.id, name=a.agent.title or a.agent.id, tags=["trellis-agent"],
                description=f"{a.agent.description or a.agent.title} (A2A endpoint {url}; its card "
                            f"{url}{AGENT_CARD_WELL_KNOWN_PATH})", input_modes=_MODES_IN, output_modes=_MODES_OUT))
    return a2a.AgentCard(
        name="Trellis", description="The agents this API key reaches; each is an A2A agent at /a2a/{agent_id} "
                                    "with its own card.",
        supported_interfaces=[], provider=a2a.AgentProvider(organization="Trellis", url=base_url), version="1",
        capabilities=a2a.AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=_MODES_IN, default_output_modes=_MODES_OUT, skills=skills, **_security())


def card_json(card: a2a.AgentCard) -> dict[str, Any]:
    """The card as JSON, with the fields 0.3 clients read (the SDK's own conversion)."""
    return agent_card_to_dict(card)
