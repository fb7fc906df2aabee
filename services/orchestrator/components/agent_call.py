"""AgentCall: run another agent of the same tenant as a child run, as a canvas node or as an Agent's tool.

Params: `agent_id` (an agent of the run's tenant: its latest published version, else its draft), `query` (the
child's `sys.query`, default `{sys.query}`), `inputs` (the child's Begin inputs: `{name: value}`, `{refs}` in text
values resolved), `session_id` (continue that session of the child agent, `{AgentCall:x@session_id}` of an
earlier turn, say; empty: a new session), `description` (what the model reads of it as a tool).
Outputs: `content` (the child's answer: live into a Message directly downstream), `run_id` and `session_id` (the
child's), `status` (succeeded, or waiting_for_user when the child paused for a form: `content` is then its tips,
and the next AgentCall with this `session_id` and the answers as `inputs` resumes it).
As a tool, the model gives `query` (taken as text, never as a template) and reads the answer.

The child is an ordinary run of the orchestrator (its own run id and session, journaled, cancellable; its record
names this run as `caller_run_id`), started by `ctx.services.children` (runs/children.py): the tenant is always
this run's, so another tenant's agent is not found. Cancelling this run cancels the child. Not in RAGFlow.
"""
from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncIterator

from services.common.errors import ServiceError
from services.orchestrator.components._remote import Text, set_answer
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params, Required
from services.orchestrator.engine import events as ev
from services.orchestrator.engine.variables import to_text


class AgentCallParams(Params):
    agent_id: Required(Text, "is required (the id of an agent of this tenant)") = None  # type: ignore[valid-type]
    query: str = "{sys.query}"
    inputs: dict[str, Any] = {}
    session_id: str = ""
    description: str = ""


@register
class AgentCall(Component):
    component_name = "AgentCall"
    exception_output = "content"
    params_model = AgentCallParams
    params: AgentCallParams

    @classmethod
    def tool_meta(cls, params: AgentCallParams) -> dict[str, Any]:
        return {"name": "",  # the tool entry's name, as for a sub-agent
                "description": f"Asks the agent {params.agent_id} and returns its answer.",
                "parameters": {"query": {"type": "string", "required": True,
                                         "description": "The request for the agent, complete in itself."}}}

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> Any:
        query = to_text(arguments.get("query", ""))
        ctx.set_input("query", query)
        return "".join([c async for c in self._answer(ctx, query)])

    async def run(self, ctx: NodeContext) -> None:
        query = await ctx.render(self.params.query)
        ctx.set_input("query", query)
        await set_answer(self, ctx, self._answer(ctx, query))

    async def _inputs(self, ctx: NodeContext) -> dict[str, Any]:
        return {k: await ctx.render(v) if isinstance(v, str) else v for k, v in self.params.inputs.items()}

    async def _answer(self, ctx: NodeContext, query: str) -> AsyncIterator[str]:
        """The child's answer as it streams; its ids and status in the outputs, failures naming the component."""
        cid, agent_id = ctx.component_id, self.params.agent_id
        children, request = ctx.services.children, ctx.request
        if children is None or request is None:
            raise RuntimeError(f"{cid}: agents calling agents needs the orchestrator's run manager, not present here")
        inputs = await self._inputs(ctx)
        ctx.set_input("agent_id", agent_id)
        tips = ""
        try:
            async with aclosing(children.run(tenant_id=request.tenant_id, agent_id=agent_id, query=query,
                                             inputs=inputs, parent_run_id=ctx.run_id,
                                             session_id=await ctx.render(self.params.session_id),
                                             user_id=request.user_id)) as events:
                async for event in events:
                    kind = event.__class__
                    if kind is ev.MessageDelta and not event.path:
                        yield event.content
                    elif kind is ev.RunStarted:
                        ctx.set_output("run_id", event.run_id)
                        ctx.set_output("session_id", event.session_id)
                    elif kind is ev.UserInputRequired:
                        tips = event.tips
                    elif kind is ev.RunFinished:
                        status = ("cancelled" if event.cancelled else "failed" if event.error
                                  else "waiting_for_user" if event.waiting_for_user else "succeeded")
                        ctx.set_output("status", status)
                        if event.error or event.cancelled:
                            raise RuntimeError(f"{cid}: agent {agent_id!r} (run {event.run_id}) {status}"
                                               + (f": {event.error}" if event.error else ""))
        except ServiceError as exc:  # refused before it ran: not found (another tenant's too), busy session...
            raise RuntimeError(f"{cid}: {exc.message}") from None
        if tips:
            yield tips
