"""An Agent's `mcp` tools: RAGFlow's `mcp` param, `[{"mcp_id": ..., "tools": {name: tool}}]`, where each tool
is what the server listed (`name`, `description`, `inputSchema`), copied into the DSL when the user picked it.

They follow the Agent's `tools` in the model's list, numbered on from them as RAGFlow numbers them
(`f"{tool name}_{index}"`). A call looks the server up in the run's tenant (`Services.mcp_servers`, so its
url, headers and variables are the saved ones, never the DSL's) and calls the tool there
(`mcp_client.call_tool`, through the run's one session per server); the Agent's `custom_header` param and
the run request's `custom_header` (RAGFlow's completion field) are sent too. A server that is gone, down,
refuses the call or runs past its timeout gives an "Error: ..." observation; the Agent goes on.
"""
from __future__ import annotations

from typing import Annotated, Any

from services.clients.llm_models import Tool
from services.orchestrator.components._tools import ToolSpec
from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.components.params import Entry, OrEmpty, Params, Required, validator
from services.orchestrator.egress import mcp as mcp_client
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp

EMPTY_SCHEMA = {"type": "object", "properties": {}}


class McpToolParams(Params):
    mcp_id: str = ""
    tool: str = ""
    custom_header: Any = None  # the Agent's


class McpTool(Component):
    """One tool of one MCP server, as an Agent tool (never a canvas node: not registered)."""

    component_name = "MCP"
    params_model = McpToolParams
    params: McpToolParams

    async def call_tool(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        store = ctx.services.mcp_servers
        mcp_id, tool = self.params.mcp_id, self.params.tool
        if store is None:
            raise RuntimeError(f"MCP server {mcp_id}: MCP servers are not available in this deployment")
        tenant = ctx.request.tenant_id if ctx.request is not None else ""
        try:
            record = await store.get(tenant, mcp_id)
        except Exception as exc:  # NotFound, a bad id
            raise RuntimeError(f"MCP server {mcp_id} of tool {tool!r}: {exc}") from None
        http = ctx.http
        if http is None:
            async with OutboundHttp(EgressPolicy.from_entries(ctx.settings.ssrf_allowlist)) as own:
                return await self._call(ctx, record.server(), tool, args, own)
        return await self._call(ctx, record.server(), tool, args, http)

    async def _call(self, ctx: NodeContext, server: mcp_client.McpServer, tool: str, args: dict[str, Any],
                    http: OutboundHttp) -> str:
        access = mcp_client.McpAccess(http, ctx.settings.mcp_timeout_s, ctx.settings.mcp_allow_stdio)
        header = self.params.custom_header
        header = dict(header) if isinstance(header, dict) else {}
        if ctx.request is not None and ctx.request.custom_header:  # the run request's win, as in RAGFlow
            header.update(ctx.request.custom_header)
        return await mcp_client.call_tool(server, tool, args, access, custom_header=header,
                                          sessions=mcp_client.run_sessions(ctx.env, ctx.env.spawn))


def _server_id(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must name an MCP server (its id)")
    return value


def _tool_map(value: Any) -> Any:
    if value is not None and not isinstance(value, dict):
        raise ValueError("must be an object {tool name: tool}")
    return value


class McpEntry(Entry):
    mcp_id: Required(Annotated[Any, validator(_server_id)], "must name an MCP server (its id)") = None  # type: ignore[valid-type]
    tools: Annotated[Any, validator(_tool_map)] = None  # {tool name: what the server listed}


# RAGFlow's `mcp` param; "" = none.
McpEntries = OrEmpty(list[McpEntry] | None)


def build(agent_id: str, entries: list[McpEntry] | str | None, first_index: int,
          custom_header: Any = None) -> list[ToolSpec]:
    specs = []
    index = first_index
    for entry in entries or ():
        for name, meta in (entry.tools or {}).items():
            meta = meta if isinstance(meta, dict) else {}
            function = f"{name}_{index}"
            index += 1
            params = {"mcp_id": entry.mcp_id, "tool": name, "custom_header": custom_header}
            instance_id = f"{agent_id}-->{name}"
            schema = meta.get("inputSchema")
            specs.append(ToolSpec(function, name, name, McpTool.component_name, instance_id, params,
                                  McpTool(instance_id, params),
                                  Tool(function, str(meta.get("description") or ""),
                                       schema if isinstance(schema, dict) and schema else EMPTY_SCHEMA)))
    return specs
