"""The tenant's agents as MCP tools: a stable name from the title, the description, an input schema from Begin's
inputs plus `query`, `session_id` and `inputs`, and the output schema of `structuredContent`."""

from __future__ import annotations

import re
from typing import Any

from mcp import types

from gateway.agent_calls import CallableAgent

RESERVED = ("query", "session_id", "inputs")
_NAME_MAX = 64  # what MCP clients (and the models behind them) accept as a tool name

_JSON_TYPES = {"line": "string", "paragraph": "string", "options": "string", "file": "string", "integer": "integer",
               "int": "integer", "float": "number", "number": "number", "boolean": "boolean", "bool": "boolean"}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "description": "the agent's answer"},
        "status": {"type": "string", "enum": ["completed", "input_required", "failed", "cancelled"]},
        "session_id": {"type": "string", "description": "pass it back as `session_id` to continue the conversation"},
        "run_id": {"type": "string"},
        "references": {"type": "array", "description": "the retrieval references of the answer (RAGFlow's shape)"},
        "awaiting": {"type": ["object", "null"],
                     "description": "with status input_required: the form the agent waits on ({tips, fields})"},
        "error": {"type": ["string", "null"]},
    },
    "required": ["answer", "status", "session_id", "run_id", "references"],
}


def slug(title: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
    return (name or "agent")[:_NAME_MAX]


def tool_names(agents: list[CallableAgent]) -> dict[str, CallableAgent]:
    """name -> agent. A name is its title's slug; titles that share a slug each get their id's start appended,
    so a name does not change with the order agents are listed in."""
    counts: dict[str, int] = {}
    for a in agents:
        counts[slug(a.agent.title)] = counts.get(slug(a.agent.title), 0) + 1
    named: dict[str, CallableAgent] = {}
    for a in agents:
        base = slug(a.agent.title)
        name = base if counts[base] == 1 else f"{base[:_NAME_MAX - 9]}_{a.agent.id[:8]}"
        named[name] = a
    return named


def field_schema(key: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One form field (Begin's or a UserFillUp's `{name, type, optional, options, value}`) as a flat JSON schema,
    the kind MCP elicitation accepts."""
    kind = str(spec.get("type") or "line")
    schema: dict[str, Any] = {"type": _JSON_TYPES.get(kind, "string"), "title": str(spec.get("name") or key)}
    options = spec.get("options")
    if kind == "options" and isinstance(options, list) and options:
        schema["enum"] = [str(o) for o in options]
    if kind == "file":
        schema["description"] = "a file URL"
    value = spec.get("value")
    if value not in (None, "", []) and not isinstance(value, (dict, list)):
        schema["default"] = value
    return schema


def required_fields(inputs: dict[str, Any]) -> list[str]:
    return [k for k, spec in inputs.items() if not spec.get("optional")]


def tool_of(name: str, a: CallableAgent) -> types.Tool:
    properties: dict[str, Any] = {
        "query": {"type": "string", "description": "Your message to the agent."},
    }
    required = required_fields(a.inputs)
    for key, spec in a.inputs.items():
        if key not in RESERVED:
            schema = field_schema(key, spec)
            if key in required:
                schema["description"] = (schema.get("description", "") + " (required to start a conversation)").strip()
            properties[key] = schema
    properties["session_id"] = {"type": "string", "description": "Continue this conversation (the `session_id` of "
                                                                 "an earlier result); omit to start a new one."}
    properties["inputs"] = {"type": "object", "additionalProperties": True,
                            "description": "Answers to the form the agent waits on (a result with status "
                                           "input_required), by field name; send them with its session_id."}
    description = a.agent.description or f"Run the agent {a.agent.title!r}."
    return types.Tool(name=name, title=a.agent.title or name, description=description,
                      inputSchema={"type": "object", "properties": properties, "additionalProperties": False},
                      outputSchema=OUTPUT_SCHEMA)


def form_schema(form: dict[str, Any]) -> dict[str, Any]:
    """The form a UserFillUp waits on as an elicitation's requestedSchema."""
    fields = {k: field_schema(k, spec) for k, spec in form.items() if isinstance(spec, dict)}
    return {"type": "object", "properties": fields, "required": required_fields(
        {k: v for k, v in form.items() if isinstance(v, dict)})}
