"""Components as Agent tools: naming, schemas, calls and observations.

An Agent's `tools` entries (`{"component_name", "name", "id", "params"}`) become `ToolSpec`s named as
RAGFlow names them: the OpenAI function is `f"{meta name}_{index}"` (`execute_code_0`,
`search_my_dateset_1`, and for a sub-agent its name with spaces as underscores, `Web_Search_Specialist_0`),
the instance id is `"<agent id>--><name with spaces as _>"`.

The tool protocol of a component class (both optional):
- `tool_meta(params) -> {"name", "description", "parameters": JSON schema}` (a classmethod; a dict in
  RAGFlow's ToolMeta shape is accepted too). Without one, RAGFlow's meta from `RAGFLOW_TOOL_META`.
- `async call_tool(ctx, arguments) -> str`: run with the model's arguments, return the observation.
  Without it the component runs as usual with the arguments merged into its params (a fresh instance
  per call), and the observation is the first of `formalized_content`, `content`, `result`, else its
  outputs as JSON.
Each call gets its own NodeContext in a child scope: outputs stay private to the call, so concurrent
calls never share them. A tool that raises, sets `_ERROR` or runs past its component time limit gives
an "Error: ..." observation; the Agent goes on.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import json_repair

from services.llm_gateway.types import Tool

from ..tracing import traced_tool
from ..variables import Scope, StreamValue, to_jsonable, to_text
from .base import Component, NodeContext, UnknownComponent, get_class

log = logging.getLogger(__name__)

MAX_OBSERVATION_CHARS = 100_000  # the prompt memory trims further to fit the model

_QUERY = {"query": {"type": "string", "required": True,
                    "description": "The search keywords: the most important words (and synonyms) of the request."}}


def _search(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "parameters": _QUERY}


# Metas of RAGFlow tools whose component has no `tool_meta` (yet), by component_name.
RAGFLOW_TOOL_META: dict[str, dict[str, Any]] = {
    "Retrieval": _search("search_my_dateset", "Searches the knowledge bases (datasets) for relevant content."),
}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    function: str  # the name the model calls: "<meta name>_<index>"
    base: str  # the meta name ("execute_code", "Web_Search_Specialist")
    name: str  # the DSL entry's name
    component_name: str
    instance_id: str
    params: dict[str, Any]
    component: Component
    schema: Tool

    def matches(self, wanted: set[str]) -> bool:
        """Whether an `enabled_tools` override names this tool (any of its names, case-insensitive)."""
        ids = {self.function, self.base, self.name, self.component_name, self.instance_id,
               self.instance_id.split("-->")[-1]}
        return bool({i.lower() for i in ids if i} & wanted)


def meta_of(cls: type[Component], entry_name: str, params: dict[str, Any]) -> dict[str, Any]:
    """{"name", "description", "parameters": JSON schema} of a component used as a tool."""
    own = getattr(cls, "tool_meta", None)
    if cls.component_name == "Agent":
        meta = {"name": entry_name.replace(" ", "_") or "agent",
                "description": "This is an agent for a specific task.", "parameters": agent_parameters(params)}
    elif callable(own):
        meta = dict(own(params))
    elif isinstance(own, dict) or cls.component_name in RAGFLOW_TOOL_META:
        meta = dict(own or RAGFLOW_TOOL_META[cls.component_name])
    elif cls.component_name == "Invoke":
        keys = [v.get("key") for v in params.get("variables") or [] if isinstance(v, dict) and v.get("key")]
        meta = {"name": "invoke", "description": "Calls an HTTP endpoint and returns the response.",
                "parameters": {k: {"type": "string", "required": False, "description": k} for k in keys}}
    else:
        meta = {"name": re.sub(r"(?<!^)(?=[A-Z])", "_", cls.component_name).lower(),
                "description": f"The {cls.component_name} component.", "parameters": _QUERY}
    params_schema = meta.get("parameters") or {}
    if not (params_schema.get("type") == "object" and isinstance(params_schema.get("properties"), dict)):
        params_schema = json_schema(params_schema)  # RAGFlow ToolMeta parameters
    desc = params.get("description")
    desc = desc if isinstance(desc, str) and desc.strip() else str(meta.get("description") or "")
    return {"name": str(meta["name"]), "description": desc.strip(), "parameters": params_schema}


def agent_parameters(params: dict[str, Any]) -> dict[str, Any]:
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


def json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    props = {}
    for k, p in parameters.items():
        prop = {"type": p.get("type", "string"), "description": p.get("description", "")}
        for extra in ("enum", "items"):
            if extra in p:
                prop[extra] = p[extra]
        props[k] = prop
    return {"type": "object", "properties": props, "required": [k for k, p in parameters.items() if p.get("required")]}


def build_toolset(agent_id: str, entries: Any) -> list[ToolSpec]:
    """The tools of an Agent, in DSL order. Entries whose component is not available are left out."""
    specs = []
    for idx, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict):
            continue
        cname = entry.get("component_name") or ""
        try:
            cls = get_class(cname)
        except UnknownComponent:
            log.warning("Agent %s: tool %s is not available here; the model will not see it", agent_id, cname)
            continue
        params = entry.get("params") if isinstance(entry.get("params"), dict) else {}
        name = str(entry.get("name") or cname)
        instance_id = f"{agent_id}-->{name.replace(' ', '_')}"
        meta = meta_of(cls, name, params)
        function = f"{meta['name']}_{idx}"
        specs.append(ToolSpec(function, meta["name"], name, cname, instance_id, params, cls(instance_id, params),
                              Tool(function, meta["description"], meta["parameters"])))
    return specs


def enabled(tools: list[ToolSpec], wanted: Any) -> list[ToolSpec]:
    """The `enabled_tools` override: when non-empty, only the tools it names stay."""
    if not wanted:
        return tools
    names = {str(w).lower() for w in (wanted if isinstance(wanted, (list, tuple, set)) else [wanted])}
    return [t for t in tools if t.matches(names)]


def parse_arguments(text: str) -> dict[str, Any]:
    """The model's argument text as an object, repaired when it is almost JSON; ValueError otherwise."""
    text = (text or "").strip() or "{}"
    try:
        value = json.loads(text)
    except ValueError:
        value = json_repair.loads(text)
    if isinstance(value, str) and value.strip()[:1] == "{":  # JSON encoded twice
        value = json_repair.loads(value)
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {text[:200]!r}")
    return value


def merge_arguments(component_name: str, params: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The params of a component run with the model's arguments (those win over the DSL's)."""
    if component_name == "Invoke":  # its arguments live in `variables` [{key, ref|value}]
        variables = [{"key": v["key"], "value": args[v["key"]]} if isinstance(v, dict) and v.get("key") in args
                     else v for v in params.get("variables") or []]
        return {**params, "variables": variables}
    return {**params, **args}


@traced_tool
async def call_tool(parent: NodeContext, spec: ToolSpec, args: dict[str, Any]) -> tuple[str, str | None]:
    """Run one tool call: (observation, error or None). Never raises, except on cancellation."""
    timeout = parent.settings.timeout_for(spec.component_name)
    comp = spec.component
    custom = getattr(comp, "call_tool", None)
    if custom is None:
        comp = type(comp)(spec.instance_id, merge_arguments(spec.component_name, spec.params, args))
    ctx = NodeContext(parent.env, spec.instance_id, spec.component_name, comp.params, Scope(parent=parent.scope),
                      parent.path)
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            if custom is not None:
                observation = to_text(await custom(ctx, args))
            else:
                await comp.run(ctx)
                await ctx.finish_streams()
                observation = await _observe(ctx)
    except TimeoutError as exc:  # our limit, or the tool's own (an HTTP timeout...)
        _stop_streams(ctx)
        msg = f"{spec.function} timed out after {timeout:g} s" if limit.expired() else (str(exc) or "timed out")
        return f"Error: {msg}", msg
    except Exception as exc:  # the model sees the error and may try something else
        _stop_streams(ctx)
        msg = str(exc) or type(exc).__name__
        log.info("tool %s failed: %s", spec.instance_id, msg)
        return f"Error: {msg}"[:MAX_OBSERVATION_CHARS], msg
    error = ctx.outputs.get("_ERROR")
    if error:
        return f"Error: {to_text(error)}"[:MAX_OBSERVATION_CHARS], to_text(error)
    return observation[:MAX_OBSERVATION_CHARS], None


def _stop_streams(ctx: NodeContext) -> None:
    for task in getattr(ctx, "_pending", None) or ():
        task.cancel()


async def _observe(ctx: NodeContext) -> str:
    outs = ctx.outputs
    for key in ("formalized_content", "content", "result"):
        v = outs.get(key)
        if isinstance(v, StreamValue):
            v = await v.wait()
        if v not in (None, ""):
            return to_text(v)
    return to_text(to_jsonable({k: v for k, v in outs.items() if not k.startswith("_")}))
