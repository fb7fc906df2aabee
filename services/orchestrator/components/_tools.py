"""Components as Agent tools: naming, schemas, calls and observations.

An Agent's `tools` entries (`{"component_name", "name", "id", "params"}`) become `ToolSpec`s named as
RAGFlow names them: the OpenAI function is `f"{meta name}_{index}"` (`execute_code_0`,
`search_my_dateset_1`, and for a sub-agent its name with spaces as underscores, `Web_Search_Specialist_0`),
the instance id is `"<agent id>--><name with spaces as _>"`.

An entry is checked by `ToolEntry` when the Agent's params are (its `params` parsed into the tool class's
`params_model`, so a tool's bad params name the field as `params.tools[0].params.<field>`).
Everything about one tool comes from its class (components/base.py, docs/adding-a-tool.md):
`tool_meta(params)` is what the model sees (a JSON schema, or RAGFlow's ToolMeta parameters, converted
here), `call_tool(ctx, arguments)` runs it and returns the observation; this module never asks which
component a tool is. Each call gets its own NodeContext in a child scope: outputs stay private to the call,
so concurrent calls never share them. A tool that raises, sets `_ERROR` or runs past its component time
limit gives an "Error: ..." observation; the Agent goes on.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import json_repair
from pydantic import Field, ValidationInfo, field_validator

from services.clients.llm_models import Tool
from services.orchestrator.components import _llm
from services.orchestrator.components.base import Component, NodeContext, UnknownComponent, get_class
from services.orchestrator.components.params import Entry, Params, problem
from services.orchestrator.engine.tracing import traced_tool
from services.orchestrator.engine.variables import Scope, to_text

log = logging.getLogger(__name__)

MAX_OBSERVATION_CHARS = 100_000  # the prompt memory trims further to fit the model


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


class ToolEntry(Entry):
    """An entry of an Agent's `tools`: the tool's class must be known (and available, unless the canvas is
    only stored), its params fit the class's `params_model`."""

    component_name: Any = Field(None, validate_default=True)
    name: Any = None
    params: Any = Field(None, validate_default=True)  # the tool's params model once parsed

    @field_validator("component_name")
    @classmethod
    def _known(cls, name: Any, info: ValidationInfo) -> Any:
        from services.orchestrator.components import (  # the registry imports the components, which import this
            PENDING,
            is_available,
        )

        if not isinstance(name, str) or not name:
            raise problem("must name the tool's component")
        if name in PENDING:
            if (info.context or {}).get("require_available", True) and not is_available(name):
                raise problem(f"tool {name} is not available yet")
        elif not is_available(name):
            raise problem(f"unknown tool component '{name}'")
        return name

    @field_validator("params")
    @classmethod
    def _tool_params(cls, params: Any, info: ValidationInfo) -> Any:
        try:
            tool = get_class(info.data.get("component_name") or "")
        except UnknownComponent:  # reported on component_name (or pending: structure only)
            return params
        if not isinstance(params, dict):  # RAGFlow leaves it out for tools without settings
            params = {}
        return tool.params_model.model_validate(params, context=info.context)


def meta_of(cls: type[Component], entry_name: str, params: Params) -> dict[str, Any]:
    """{"name", "description", "parameters": JSON schema} of a component used as a tool: its class's
    `tool_meta`, named after the entry when the meta has no name, described by `params.description` when
    that is set."""
    meta = cls.tool_meta(params)
    params_schema = meta.get("parameters") or {}
    if not (params_schema.get("type") == "object" and isinstance(params_schema.get("properties"), dict)):
        params_schema = json_schema(params_schema)  # RAGFlow ToolMeta parameters
    desc = params.given("description")
    desc = desc if isinstance(desc, str) and desc.strip() else str(meta.get("description") or "")
    name = str(meta.get("name") or entry_name.replace(" ", "_"))
    return {"name": name, "description": desc.strip(), "parameters": params_schema}


def json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    props = {}
    for k, p in parameters.items():
        prop = {"type": p.get("type", "string"), "description": p.get("description", "")}
        for extra in ("enum", "items"):
            if extra in p:
                prop[extra] = p[extra]
        props[k] = prop
    return {"type": "object", "properties": props, "required": [k for k, p in parameters.items() if p.get("required")]}


def build_toolset(agent_id: str, entries: list[ToolEntry] | list[dict[str, Any]] | None) -> list[ToolSpec]:
    """The tools of an Agent, in DSL order: its parsed `tool_entries`, or the DSL's entries (their params
    parsed here, raising ParamsInvalid when they do not fit). Entries whose component is not available are
    left out."""
    specs = []
    for idx, entry in enumerate(entries or ()):
        if isinstance(entry, dict):
            entry = ToolEntry.model_construct(**entry)
        cname = str(entry.component_name or "")
        try:
            cls = get_class(cname)
        except UnknownComponent:
            log.warning("Agent %s: tool %s is not available here; the model will not see it", agent_id, cname)
            continue
        name = str(entry.name or cname)
        instance_id = f"{agent_id}-->{name.replace(' ', '_')}"
        comp = cls(instance_id, entry.params if isinstance(entry.params, (Params, dict)) else {})
        meta = meta_of(cls, name, comp.params)
        function = f"{meta['name']}_{idx}"
        specs.append(ToolSpec(function, meta["name"], name, cname, instance_id, comp.params.as_dict(), comp,
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


@traced_tool
async def call_tool(parent: NodeContext, spec: ToolSpec, args: dict[str, Any]) -> tuple[str, str | None]:
    """Run one tool call: (observation, error or None). Never raises, except on cancellation."""
    timeout = parent.settings.timeout_for(spec.component_name)
    comp = spec.component
    ctx = NodeContext(parent.env, spec.instance_id, spec.component_name, comp.params, Scope(parent=parent.scope),
                      parent.path)
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            observation = to_text(await comp.call_tool(ctx, args))
            if ctx.inputs.get("model_fallback"):  # a sub-agent ran on the default model: its Agent's event says so
                _llm.note_fallback(parent, str(ctx.inputs["model_fallback"]))
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
