"""Free-form JSON travels in `*_json` string fields of the protos; this reads one that must hold an object."""

from __future__ import annotations

import json
from typing import Any

from services.common.errors import InvalidArgument


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
