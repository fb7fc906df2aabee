"""Helpers shared by the data components: a field-naming error and small coercions."""
from __future__ import annotations

import json
from typing import Any

from services.orchestrator.components.base import NodeContext


class FieldError(ValueError):
    """Bad input at run time, naming the component and the field (like a ValidationIssue)."""

    def __init__(self, component_id: str, field: str, message: str) -> None:
        super().__init__(f"{component_id}: {field}: {message}")
        self.component_id = component_id
        self.field = field


def type_name(value: Any) -> str:
    """A JSON-ish name for error messages ("list", "object", "string"...)."""
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "list",
            tuple: "list", dict: "object"}.get(type(value), type(value).__name__)


def as_bool(value: Any) -> bool:
    """RAGFlow's lenient flag parsing: "1"/"true"/"yes"/"on" are true, like bool() otherwise."""
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


def decode_json_container(value: Any) -> Any:
    """A string holding a JSON list/object becomes that container; anything else is unchanged."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


async def resolve_operand(ctx: NodeContext, value: Any) -> Any:
    """A param that may hold a bare reference: the referenced value (streams awaited), else the literal."""
    if isinstance(value, str) and ctx.is_ref(value):
        return await ctx.value(value)
    return value
