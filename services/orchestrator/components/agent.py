"""Agent: an LLM that calls tools (components, sub-agents) in a ReAct loop, then answers.

Params (RAGFlow `agent/component/agent_with_tools.py`): every LLM param (see llm.py) plus `tools`
(entries `{"component_name", "name", "id", "params"}`: CodeExec, Retrieval, Invoke, search tools, and
Agents, which run as sub-agents with their own tools), `max_rounds` (5; rounds of tool calls before a
final answer is forced), `description` (what a parent agent reads about this one as a tool),
`user_prompt` (the sub-agent's call argument description), and the Trellis addition `tool_calling`:
"native" (default) or "text" (JSON-in-text tool calls for models without function calling).
The loop itself is `_react.React`; tools are built by `_tools.build_toolset`, and the tools of MCP servers
(`mcp`: [{"mcp_id", "tools"}], with `custom_header` sent to them) by `_mcp_tools.build`.

Called as a tool (a sub-agent) its `user_prompt`, `reasoning` and `context` arguments become the
user prompt (RAGFlow's REASONING / CONTEXT / QUERY layout) and its answer is the observation.
Outputs: `content` (a stream while the final answer is generated), `structured` with an
`outputs.structured` schema, `use_tools` ([{name, arguments, results}], RAGFlow) and `agent_thoughts`
([{position, round, thought, tool, tool_input, observation, error, elapsed_s, call_id}], the run's trace).
Run overrides: `llm_id` (every Agent, sub-agents too), `system_prompt` (top-level Agents, not
sub-agents), `enabled_tools` (every Agent keeps only the tools it names, by function, meta, entry or
component name), `attachments` (a system message for top-level Agents).
"""
from __future__ import annotations

import logging
from typing import Any, Literal

from services.clients.llm_models import Message, ResponseFormat
from services.orchestrator.components import _llm, _mcp_tools, _react, _tools
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.llm import build_prompt
from services.orchestrator.components.params import Number

log = logging.getLogger(__name__)

MAX_ROUNDS_CAP = 50  # a DSL value above this is clamped: each round is a model call


class AgentParams(LlmParams):
    tools: list[_tools.ToolEntry] | None = None
    llm_enabled_tools: list[_tools.ToolEntry] | None = None  # `tools` in pre-0.20 DSLs
    mcp: _mcp_tools.McpEntries = None
    max_rounds: Number(ge=0, integer=True) = 5  # type: ignore[valid-type]
    tool_calling: Literal["native", "text"] = "native"
    user_prompt: Any = None  # as a sub-agent: what its call argument is
    custom_header: Any = None  # sent to the MCP servers
    output_structure: Any = None  # pre-0.20: an example of the JSON answer (read as `structured_content`)

    @property
    def tool_entries(self) -> list[_tools.ToolEntry]:
        """`tools`, or `llm_enabled_tools` as pre-0.20 DSLs (RAGFlow's DSL examples) name them."""
        return self.tools or self.llm_enabled_tools or []


def _max_rounds(params: AgentParams) -> int:
    rounds = params.max_rounds
    return min(MAX_ROUNDS_CAP, max(0, int(float(rounds)))) if rounds not in (None, "") else 5


def _sub_agent_prompt(args: dict[str, Any]) -> str:
    text = ""
    if args.get("reasoning"):
        text += f"\nREASONING:\n{args['reasoning']}\n"
    if args.get("context"):
        text += f"\nCONTEXT:\n{args['context']}\n"
    return f"{text}\nQUERY:\n{args['user_prompt']}\n" if text else str(args["user_prompt"])


def _tool_parameters(params: AgentParams) -> dict[str, Any]:
    """A sub-agent's arguments (RAGFlow's AgentParam meta)."""
    order = params.user_prompt
    if not isinstance(order, str) or not order.strip():
        order = "This is the order you need to send to the agent."
    return {
        "user_prompt": {"type": "string", "required": True, "description": order},
        "reasoning": {"type": "string", "required": True, "description": "Supervisor's reasoning for choosing this "
                      "agent: why it is invoked and what is expected of it."},
        "context": {"type": "string", "required": True, "description": "All background information, prior facts, "
                    "decisions and state the agent needs, as detailed and self-contained as possible."},
    }


@register
class Agent(Component):
    component_name = "Agent"
    exception_output = "content"
    params_model = AgentParams
    params: AgentParams
    __slots__ = ("tools",)

    def setup(self) -> None:
        entries = self.params.tool_entries
        self.tools = _tools.build_toolset(self.id, entries)
        # MCP tools are numbered on after every `tools` entry, as RAGFlow numbers them.
        self.tools += _mcp_tools.build(self.id, self.params.mcp, len(entries), self.params.custom_header)

    @classmethod
    def tool_meta(cls, params: AgentParams) -> dict[str, Any]:
        """As a sub-agent: no name of its own (the tool entry's name is the function's, as in RAGFlow)."""
        return {"name": "", "description": "This is an agent for a specific task.",
                "parameters": _tool_parameters(params)}

    def thoughts(self, ctx: NodeContext) -> str:
        return _llm.thinking_text(ctx, self.params)

    async def run(self, ctx: NodeContext) -> None:
        await self._run(ctx, None)

    async def call_tool(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        """As a sub-agent: `user_prompt`, `reasoning` and `context` in, the whole answer out."""
        await self._run(ctx, args)
        return str(ctx.output("content") or "")

    async def _run(self, ctx: NodeContext, args: dict[str, Any] | None) -> None:
        as_tool = args is not None
        ov = _llm.overrides(ctx)
        conf = _llm.ModelConf.of(ctx, self.params)
        schema = _llm.output_schema(self.params)
        prompts = None
        if args and args.get("user_prompt"):
            prompts = [{"role": "user", "content": _sub_agent_prompt(args)}]
        prompt = await build_prompt(
            ctx, self.params, sys_prompt=ov.get("system_prompt") if ov.get("system_prompt") and not as_tool else None,
            prompts=prompts, literal_prompts=prompts is not None, attachments=not as_tool,
            extra_system=(_llm.structured_prompt(schema),) if schema else ())
        tools = _tools.enabled(self.tools, ov.get("enabled_tools"))
        text_mode = self.params.tool_calling == "text" or conf.model_id in _react.TEXT_ONLY_MODELS
        # Pre-0.20 DSLs (RAGFlow's iteration example) give `output_structure`, an example of the JSON the
        # answer must be, and read the parsed answer as `structured_content`.
        legacy = bool(self.params.output_structure)
        streamed = not as_tool and not legacy and _llm.should_stream(self, schema)
        loop = _react.React(ctx, conf, tools, prompt, max_rounds=_max_rounds(self.params), text_mode=text_mode,
                            params=self.params, whole=not streamed)
        if tools:
            ctx.set_output("use_tools", loop.use_tools)  # filled in as the tools run
            ctx.set_output("agent_thoughts", loop.steps)
        chunks = loop.answer()
        if not streamed:
            text = "".join([c async for c in chunks])
            ctx.set_output("content", text)
            if schema is not None:
                ctx.set_output("structured", await self._structured(ctx, conf, text, schema))
            if legacy:
                try:
                    ctx.set_output("structured_content", _llm.parse_structured(text))
                except ValueError:
                    raise ValueError(f"{ctx.component_id}: the answer is not the JSON that params.output_structure "
                                     "asks for") from None
            return
        rest = await _llm.primed(chunks)
        ctx.set_output("content", "" if rest is None else ctx.stream(rest))

    async def _structured(self, ctx: NodeContext, conf: _llm.ModelConf, text: str, schema: dict[str, Any]) -> Any:
        try:
            return _llm.parse_structured(text)
        except ValueError:
            pass
        # RAGFlow `_force_format_to_schema_async`: ask for the answer again, as JSON only.
        messages = [Message("system", _llm.structured_prompt(schema) + "\nIMPORTANT: Output ONLY valid JSON."),
                    Message("user", text)]
        again = await _llm.complete(ctx, conf, messages,
                                    response_format=ResponseFormat("json_schema", schema=schema, name="structured"))
        try:
            return _llm.parse_structured(again)
        except ValueError:
            raise ValueError(f"{ctx.component_id}: the answer cannot be parsed as JSON "
                             "for outputs.structured") from None
