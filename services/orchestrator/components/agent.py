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
from typing import Any

from services.llm_gateway.models import Message, ResponseFormat

from . import _llm, _mcp_tools, _react, _tools
from .base import Component, NodeContext, ValidationIssue, checked_params, register
from .llm import build_prompt

log = logging.getLogger(__name__)

MAX_ROUNDS_CAP = 50  # a DSL value above this is clamped: each round is a model call


def _max_rounds(params: dict[str, Any]) -> int:
    try:
        return min(MAX_ROUNDS_CAP, max(0, int(params.get("max_rounds", 5))))
    except (TypeError, ValueError):
        return 5


def _sub_agent_prompt(args: dict[str, Any]) -> str:
    text = ""
    if args.get("reasoning"):
        text += f"\nREASONING:\n{args['reasoning']}\n"
    if args.get("context"):
        text += f"\nCONTEXT:\n{args['context']}\n"
    return f"{text}\nQUERY:\n{args['user_prompt']}\n" if text else str(args["user_prompt"])


def _tool_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """A sub-agent's arguments (RAGFlow's AgentParam meta)."""
    order = params.get("user_prompt")
    if not isinstance(order, str) or not order.strip():
        order = "This is the order you need to send to the agent."
    return {
        "user_prompt": {"type": "string", "required": True, "description": order},
        "reasoning": {"type": "string", "required": True, "description": "Supervisor's reasoning for choosing this "
                      "agent: why it is invoked and what is expected of it."},
        "context": {"type": "string", "required": True, "description": "All background information, prior facts, "
                    "decisions and state the agent needs, as detailed and self-contained as possible."},
    }


def _check_tools(cpn_id: str, field: str, tools: Any) -> list[ValidationIssue]:
    from . import PENDING, registered  # the registry imports this module

    if tools is None:
        return []
    if not isinstance(tools, list):
        return [ValidationIssue(cpn_id, field, "must be a list of tool components")]
    issues = []
    for i, entry in enumerate(tools):
        where = f"{field}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("component_name"), str):
            issues.append(ValidationIssue(cpn_id, where, "must be {\"component_name\", \"name\", \"params\"}"))
            continue
        name = entry["component_name"]
        cls = registered().get(name)
        params = entry.get("params") if isinstance(entry.get("params"), dict) else {}
        if cls is None and name not in PENDING:
            issues.append(ValidationIssue(cpn_id, f"{where}.component_name", f"unknown tool component '{name}'"))
        elif cls is not None:  # a tool's params must be sound, as a node's are
            issues += [ValidationIssue(cpn_id, f"{where}.{i_.field}", i_.message) for i_ in checked_params(cls, cpn_id, params)]
    return issues


def _tool_entries(params: dict[str, Any]) -> Any:
    """`tools`, or `llm_enabled_tools` as pre-0.20 DSLs (RAGFlow's DSL examples) name them."""
    return params.get("tools") or params.get("llm_enabled_tools")


@register
class Agent(Component):
    component_name = "Agent"
    exception_output = "content"
    __slots__ = ("tools",)

    def setup(self) -> None:
        entries = _tool_entries(self.params)
        self.tools = _tools.build_toolset(self.id, entries)
        # MCP tools are numbered on after every `tools` entry, as RAGFlow numbers them.
        self.tools += _mcp_tools.build(self.id, self.params.get("mcp"), len(entries) if isinstance(entries, list) else 0,
                                       self.params.get("custom_header"))

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        issues = _llm.check_llm_params(cpn_id, params)
        rounds = params.get("max_rounds")
        if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, (int, str))
                                   or not str(rounds).strip().isdigit()):
            issues.append(ValidationIssue(cpn_id, "params.max_rounds",
                                          f"must be a non-negative integer, got {rounds!r}"))
        if params.get("tool_calling", "native") not in ("native", "text"):
            issues.append(ValidationIssue(cpn_id, "params.tool_calling", "must be 'native' or 'text'"))
        field = "params.tools" if params.get("tools") or not params.get("llm_enabled_tools") else "params.llm_enabled_tools"
        return issues + _check_tools(cpn_id, field, _tool_entries(params)) + _mcp_tools.check(cpn_id, params.get("mcp"))

    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
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
        text_mode = self.params.get("tool_calling") == "text" or conf.model_id in _react.TEXT_ONLY_MODELS
        loop = _react.React(ctx, conf, tools, prompt, max_rounds=_max_rounds(self.params), text_mode=text_mode)
        if tools:
            ctx.set_output("use_tools", loop.use_tools)  # filled in as the tools run
            ctx.set_output("agent_thoughts", loop.steps)
        chunks = loop.answer()
        # Pre-0.20 DSLs (RAGFlow's iteration example) give `output_structure`, an example of the JSON the
        # answer must be, and read the parsed answer as `structured_content`.
        legacy = bool(self.params.get("output_structure"))
        if as_tool or legacy or not _llm.should_stream(self.params, schema):
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
