"""Running a web tool the two ways the engine does: as an Agent's tool call, and as a canvas node.

    obs, err, ctx = await agent_call("TavilySearch", {"api_key": "k"}, {"query": "q"})   # ctx.env.state: references
    ctx = await node_run("TavilySearch", {"query": "sys.query"}, query="q")

Both point the SSRF allow-list at 127.0.0.1 (where the fake API listens) unless `allow=False`.
"""
from __future__ import annotations

from typing import Any

from services.orchestrator.components import get_class
from services.orchestrator.components._tools import build_toolset, call_tool
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest, SessionState
from tests.support.fake_web_api import allow_local


def context(*, allow: bool = True, query: str = "", component_id: str = "Agent:a",
            component_name: str = "Agent") -> NodeContext:
    settings = allow_local() if allow else EngineSettings()
    ctx = NodeContext.for_test({}, services=Services(settings=settings), component_id=component_id,
                               component_name=component_name, globals_={"sys.query": query},
                               request=RunRequest(run_id="run-test", query=query))
    ctx.env.state = SessionState.fresh()
    return ctx


async def agent_call(component_name: str, params: dict[str, Any], arguments: dict[str, Any], *,
                     allow: bool = True) -> tuple[str, str | None, NodeContext]:
    """(observation, error, the Agent's ctx) of one tool call, through the Agent's tool machinery."""
    parent = context(allow=allow)
    [spec] = build_toolset("Agent:a", [{"component_name": component_name, "name": component_name,
                                        "params": params}])
    observation, error = await call_tool(parent, spec, arguments)
    return observation, error, parent


def tool_schema(component_name: str, params: dict[str, Any] | None = None) -> Any:
    """The function the model is offered for this tool."""
    [spec] = build_toolset("Agent:a", [{"component_name": component_name, "params": params or {}}])
    return spec.schema


async def node_run(component_name: str, params: dict[str, Any], *, query: str = "", allow: bool = True,
                   component_id: str | None = None) -> NodeContext:
    """Run the tool as a canvas node; its ctx holds outputs and inputs (ctx.env.state: references)."""
    cid = component_id or f"{component_name}:node"
    ctx = context(allow=allow, query=query, component_id=cid, component_name=component_name)
    await get_class(component_name)(cid, params).run(ctx)
    return ctx


def references(ctx: NodeContext) -> dict[str, Any]:
    retrieval = ctx.env.state.retrieval
    return retrieval[-1] if retrieval else {}
