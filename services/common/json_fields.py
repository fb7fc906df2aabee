"""Free-form JSON travels in `*_json` string fields of the protos and in stored records: `json_object` reads one
that must hold an object; `dumps`/`dump_bytes` are the one encoder of the hot paths (orjson)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from services.common.errors import InvalidArgument


def dump_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON (non-ASCII kept as is); anything unserialisable becomes its str(). orjson, and the
    stdlib for what orjson refuses (ints past 64 bits)."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def dumps(value: Any) -> str:
    """`dump_bytes` as text (a proto string field, a Redis value read back as text)."""
    return dump_bytes(value).decode()


def json_object(text: str, field: str) -> dict[str, Any]:
    """The object in `text` ({} when empty), or InvalidArgument naming `field` and what is wrong with it."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{field} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field} must be a JSON object, not {type(value).__name__}")
    return value
