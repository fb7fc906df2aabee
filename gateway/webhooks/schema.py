"""A webhook's declared schema (Begin's `schema`: {"query", "headers", "body"}, each {"properties",
"required"}): only the declared fields are kept, a missing optional one takes its type's default, strings
are cast to the declared type, and an error names the section and the field ("body missing required field:
x", "query.n auto-cast failed: ...", "body.tags type mismatch: expected array<string>, got list").
RAGFlow's `extract_by_schema` and its helpers, line for line."""

from __future__ import annotations

import json
from typing import Any

from gateway.webhooks import WebhookRefused


def extract(data: dict[str, Any], schema: dict[str, Any], name: str) -> dict[str, Any]:
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    required = schema.get("required", []) if isinstance(schema, dict) else []
    extracted: dict[str, Any] = {}
    for field, field_schema in (props or {}).items():
        field_type = field_schema.get("type") if isinstance(field_schema, dict) else None
        if field in required and field not in data:
            raise WebhookRefused(f"{name} missing required field: {field}")
        if field not in data:
            extracted[field] = default_for_type(field_type)
            continue
        try:
            value = auto_cast(data[field], field_type)
        except Exception as exc:  # RAGFlow reports any cast failure the same way
            raise WebhookRefused(f"{name}.{field} auto-cast failed: {exc}") from None
        if not validate_type(value, field_type):
            raise WebhookRefused(f"{name}.{field} type mismatch: expected {field_type}, got {type(value).__name__}")
        extracted[field] = value
    return extracted


def default_for_type(t: str | None) -> Any:
    if t == "file":
        return []
    if t == "object":
        return {}
    if t == "boolean":
        return False
    if t == "number":
        return 0
    if t == "string":
        return ""
    if t and t.startswith("array"):
        return []
    return None


def auto_cast(value: Any, expected: str | None) -> Any:
    """A string converted to the schema's type when it can be; anything else as it is."""
    if not isinstance(value, str):
        return value
    v = value.strip()
    if expected == "boolean":
        if v.lower() in ("true", "1"):
            return True
        if v.lower() in ("false", "0"):
            return False
        raise ValueError(f"Cannot convert '{value}' to boolean")
    if expected == "number":
        if v.isdigit() or (v.startswith("-") and v[1:].isdigit()):
            return int(v)
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"Cannot convert '{value}' to number") from None
    if expected == "object":
        parsed = _json(v)
        if isinstance(parsed, dict):
            return parsed
        raise ValueError(f"Cannot convert '{value}' to object")
    if expected and expected.startswith("array"):
        parsed = _json(v)
        if isinstance(parsed, list):
            return parsed
        raise ValueError(f"Cannot convert '{value}' to array")
    return value


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def validate_type(value: Any, t: str | None) -> bool:
    if t == "file":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "number":
        return isinstance(value, (int, float))  # a bool too, as in RAGFlow (bool is an int)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "object":
        return isinstance(value, dict)
    if t and t.startswith("array"):
        if not isinstance(value, list):
            return False
        if "<" in t and ">" in t:
            inner = t[t.find("<") + 1:t.find(">")]
            return all(validate_type(item, inner) for item in value)
        return True
    return True
