"""A2AAgent: ask a remote A2A agent, as a canvas node or as an Agent's tool (agents calling agents).

Params: `url` (the agent's card `.../agent-card.json`, its base URL with the card at
`/.well-known/agent-card.json`, or its JSON-RPC endpoint; `{refs}` resolved), `headers` (an object, or a JSON
object as text; `{refs}` in values resolved: `{"Authorization": "Bearer {env.agent_key}"}`), `query` (the
message, default `{sys.query}`), `context_id` (continue a conversation with the agent: `{A2AAgent:x@context_id}`
of an earlier turn, say), `streaming` (default on: SendStreamingMessage when the card allows it), `timeout`
(seconds one read may wait, default 60; the whole call is bounded by the component time limit), `description`
(what the model reads of it as a tool).
Outputs: `content` (the answer: live into a Message directly downstream), `task_id`, `context_id`, `state`
(completed, input_required...).
As a tool, the model gives `query` (taken as text, never as a template) and reads the answer.

The a2a-sdk client does the protocol (services/orchestrator/egress/a2a.py); every connection goes through the
SSRF guard (TRELLIS_SSRF_ALLOWLIST lets private addresses through). Cancelling the run closes the stream and
cancels the remote task (CancelTask). Not in RAGFlow.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, AsyncIterator

from services.orchestrator.components._remote import Text, set_answer
from services.orchestrator.components._fields import FieldError, as_bool
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Number, Params, Required, validator
from services.orchestrator.egress.a2a import A2AConversation, A2AError
from services.orchestrator.egress.http import EgressBlocked, EgressPolicy, OutboundHttp
from services.orchestrator.engine.variables import to_text


def _headers(value: Any) -> Any:
    if value in (None, "") or isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            if isinstance(json.loads(value), dict):
                return value
        except ValueError:
            pass
    raise ValueError("must be an object of header names and values (or one as JSON text)")


class A2AAgentParams(Params):
    url: Required(Text, "is required (the agent's card, its base URL or its JSON-RPC endpoint)") = None  # type: ignore[valid-type]
    headers: Annotated[Any, validator(_headers)] = None
    query: str = "{sys.query}"
    context_id: str = ""
    streaming: Any = True
    timeout: Number(ge=1, ref=True) = 60  # type: ignore[valid-type]
    description: str = ""


@register
class A2AAgent(Component):
    component_name = "A2AAgent"
    exception_output = "content"
    params_model = A2AAgentParams
    params: A2AAgentParams

    @classmethod
    def tool_meta(cls, params: A2AAgentParams) -> dict[str, Any]:
        return {"name": "",  # the tool entry's name, as for a sub-agent
                "description": f"Asks the remote agent at {params.url} and returns its answer.",
                "parameters": {"query": {"type": "string", "required": True,
                                         "description": "The message for the agent, complete in itself."}}}

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> Any:
        conversation = await self._conversation(ctx)
        query = to_text(arguments.get("query", ""))
        ctx.set_input("query", query)
        return "".join([c async for c in self._answer(ctx, conversation, query, await ctx.render(self.params.context_id))])

    async def run(self, ctx: NodeContext) -> None:
        conversation = await self._conversation(ctx)
        query = await ctx.render(self.params.query)
        ctx.set_input("query", query)
        await set_answer(self, ctx, self._answer(ctx, conversation, query, await ctx.render(self.params.context_id)))

    async def _conversation(self, ctx: NodeContext) -> A2AConversation:
        cid = ctx.component_id
        http = ctx.http
        if http is None:  # no shared client (a test's ctx): one with the deployment's policy
            try:
                http = OutboundHttp(EgressPolicy.from_entries(ctx.settings.ssrf_allowlist))
            except ValueError as exc:
                raise RuntimeError(f"{cid}: engine setting ssrf_allowlist: {exc}") from None
        url = (await ctx.render(self.params.url)).strip()
        ctx.set_input("url", url)
        try:
            timeout_s = float(await ctx.render(str(self.params.timeout)))
        except ValueError:
            raise FieldError(cid, "params.timeout", f"must be a number of seconds, not {self.params.timeout!r}") from None
        return A2AConversation(http, url, headers=await self._headers(ctx), timeout_s=timeout_s,
                               streaming=as_bool(self.params.streaming))

    async def _headers(self, ctx: NodeContext) -> dict[str, str]:
        raw = self.params.headers or {}
        headers: dict[str, str] = {}
        for name, value in (json.loads(raw) if isinstance(raw, str) else raw).items():
            text = await ctx.render(value) if isinstance(value, str) else to_text(value)
            if any(c in str(name) + text for c in "\r\n"):
                raise FieldError(ctx.component_id, "params.headers", f"header '{name}' contains a line break")
            if str(name).strip() and text.strip():
                headers[str(name).strip()] = text.strip()
        return headers

    async def _answer(self, ctx: NodeContext, conversation: A2AConversation, query: str,
                      context_id: str) -> AsyncIterator[str]:
        """The answer's chunks, the conversation's ids in the outputs, failures naming the component."""
        cid = ctx.component_id
        try:
            async for chunk in conversation.answer(query, context_id=context_id):
                ctx.set_output("task_id", conversation.task_id)
                ctx.set_output("context_id", conversation.context_id)
                yield chunk
        except EgressBlocked as exc:
            raise FieldError(cid, "params.url", str(exc)) from None
        except ValueError as exc:  # not an http(s) URL, no host
            raise FieldError(cid, "params.url", str(exc)) from None
        except A2AError as exc:
            raise RuntimeError(f"{cid}: {exc}") from None
        finally:
            ctx.set_output("task_id", conversation.task_id)
            ctx.set_output("context_id", conversation.context_id)
            ctx.set_output("state", conversation.state)
