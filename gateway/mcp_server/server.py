"""Trellis as an MCP server (the official `mcp` package's low-level `Server`, Streamable HTTP): the tenant's
agents are its tools.

- `tools/list`: on `/mcp`, the tenant's published agents; on `/api/v1/agents/{agent_id}/mcp`, that one agent.
- `tools/call` runs the agent: a progress notification as each component finishes (when the call sent a
  progressToken); then the answer as text content, and `structuredContent` {answer, status, session_id, run_id,
  references}: `session_id` in the next call continues the conversation.
- A UserFillUp pause is an elicitation when the client declared the capability (the answers resume the run in
  the same call), else a result with status `input_required` that says what is awaited and how to answer
  (`inputs` with the same `session_id`).
- A run the orchestrator refuses to admit (the tenant over a limit) is a JSON-RPC error, code
  `refusal.JSONRPC_REFUSED`, its `data` holding the delay (`retry_after` in seconds, `retry_after_ms`), the
  tenant and the limit (gateway/refusal.py): the call is worth making again then, unlike a failed tool.
- A client's `notifications/cancelled` cancels the handler, which closes the run's turn: the orchestrator
  cancels the run.

The tenant is the one the request's API key maps to (gateway/mcp_server/routes.py puts it in the ASGI scope's
`state`); every orchestrator call carries it, so another tenant's agents and sessions do not exist here.
The tools of one tenant are listed from the orchestrator on every `tools/list` and `tools/call`: nothing about
them is cached in the process, where one tenant's cache could answer another.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import grpc
import jsonschema
from mcp import types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import McpError

from gateway import refusal
from gateway.agent_calls import CallableAgent, RunOutcome, call_request, one_agent, tenant_agents
from gateway.errors import GatewayError, from_rpc_error
from gateway.mcp_server.tools import RESERVED, form_schema, required_fields, tool_names, tool_of
from gateway.orchestrator import Orchestrator

log = logging.getLogger(__name__)

MAX_PAUSES = 20  # UserFillUp forms answered by elicitation within one call, against a canvas that asks forever


@dataclass(frozen=True)
class Caller:
    """Who calls, from the scope state the route set: the tenant, the orchestrator client, and on an agent's own
    endpoint its id."""

    orch: Orchestrator
    tenant: str
    agent_id: str | None
    api_key_id: str = ""  # the caller's key's id, whose own limits apply too (gateway/auth.py)


def _caller(server: Server) -> Caller:
    state = server.request_context.request.state  # the Starlette request of the HTTP call carrying this message
    return Caller(state.orchestrator, state.tenant, getattr(state, "agent_id", None), getattr(state, "api_key_id", ""))


async def _tools(caller: Caller) -> dict[str, CallableAgent]:
    if caller.agent_id is not None:
        agent = await one_agent(caller.orch, caller.tenant, caller.agent_id)
        return tool_names([agent])
    return tool_names(await tenant_agents(caller.orch, caller.tenant, published_only=True))


def build_server(name: str = "trellis", version: str = "1") -> Server:
    server: Server = Server(name, version=version, instructions=(
        "Each tool is a Trellis agent. Call it with `query`; pass the `session_id` of its result to continue "
        "the conversation."))

    async def list_tools(req: types.ListToolsRequest) -> types.ServerResult:
        try:
            tools = await _tools(_caller(server))
        except grpc.aio.AioRpcError as exc:
            raise McpError(types.ErrorData(code=types.INTERNAL_ERROR, message=from_rpc_error(exc).message)) from None
        return types.ServerResult(types.ListToolsResult(tools=[tool_of(n, a) for n, a in tools.items()]))

    async def call_tool(req: types.CallToolRequest) -> types.ServerResult:
        try:
            result = await _call(server, req.params.name, dict(req.params.arguments or {}))
        except GatewayError as err:
            if err.refusal is not None:
                refusal.count(err.refusal, "mcp", _caller(server).tenant)
                raise McpError(types.ErrorData(code=refusal.JSONRPC_REFUSED, message=err.message,
                                               data=refusal.jsonrpc_data(err.refusal))) from None
            result = _error(err.message)
        except grpc.aio.AioRpcError as exc:
            result = _error(from_rpc_error(exc).message)
        return types.ServerResult(result)

    # Registered as handlers rather than through the decorators, which keep one tool cache for the whole server
    # (every tenant) and would validate one tenant's call against another's schema of the same name.
    server.request_handlers[types.ListToolsRequest] = list_tools
    server.request_handlers[types.CallToolRequest] = call_tool
    return server


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], isError=True)


async def _call(server: Server, name: str, args: dict[str, Any]) -> types.CallToolResult:
    caller = _caller(server)
    ctx = server.request_context
    tools = await _tools(caller)
    agent = tools.get(name)
    if agent is None:
        return _error(f"unknown tool {name!r}; tools/list names the tools")
    try:
        jsonschema.validate(args, tool_of(name, agent).inputSchema)
    except jsonschema.ValidationError as exc:
        return _error(f"invalid arguments: {exc.message}")
    session_id = str(args.get("session_id") or "")
    inputs: dict[str, Any] = {k: v for k, v in args.items() if k not in RESERVED}
    inputs.update(args.get("inputs") or {})
    if not session_id and (missing := [k for k in required_fields(agent.inputs) if k not in inputs]):
        return _error(f"missing required argument(s): {', '.join(missing)}")
    query = str(args.get("query") or "")
    token = ctx.meta.progressToken if ctx.meta is not None else None
    can_elicit = ctx.session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability()))
    progress = 0
    for _ in range(MAX_PAUSES + 1):
        req = await call_request(caller.orch, caller.tenant, agent.agent.id, query=query, inputs=inputs,
                                 session_id=session_id, api_key_id=caller.api_key_id)
        outcome = RunOutcome()
        async with caller.orch.run(req) as events:
            async for ev in events:
                kind = outcome.feed(ev)
                if kind == "node_finished" and token is not None and not ev.node_finished.skipped:
                    progress += 1
                    n = ev.node_finished
                    await ctx.session.send_progress_notification(
                        token, progress, message=f"{n.component_name or ev.node_id} finished",
                        related_request_id=ctx.request_id)
        session_id = outcome.session_id or session_id
        if not outcome.waiting or not can_elicit or outcome.form is None:
            return _result(name, outcome)
        answer = await ctx.session.elicit(outcome.tips or "The agent needs more information.",
                                          form_schema(outcome.form), related_request_id=ctx.request_id)
        if answer.action != "accept":
            return _result(name, outcome, declined=answer.action)
        query, inputs = "", dict(answer.content or {})
    return _result(name, outcome)


def _result(tool: str, outcome: RunOutcome, *, declined: str = "") -> types.CallToolResult:
    status = ("input_required" if outcome.waiting else "cancelled" if outcome.cancelled
              else "failed" if outcome.error or outcome.finished is None else "completed")
    structured: dict[str, Any] = {"answer": outcome.text, "status": status, "session_id": outcome.session_id,
                                  "run_id": outcome.run_id, "references": outcome.references, "awaiting": None,
                                  "error": outcome.error or None}
    text = outcome.text
    if status == "input_required":
        form = outcome.form or {}
        structured["awaiting"] = {"tips": outcome.tips, "fields": form_schema(form)}
        how = (f"Call `{tool}` again with session_id {outcome.session_id!r} and `inputs` "
               f"{json.dumps({k: '...' for k in form})}.")
        why = f" (the form was {declined}ed)" if declined else ""
        text = "\n\n".join(t for t in (outcome.text, f"The agent is waiting for input{why}: {outcome.tips}".rstrip(": "),
                                       f"Fields: {json.dumps(form_schema(form)['properties'])}", how) if t)
    elif status == "failed":
        text = outcome.error or "the run ended without finishing"
    elif status == "cancelled":
        text = outcome.text or "the run was cancelled"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structuredContent=structured,
                                isError=status == "failed")
