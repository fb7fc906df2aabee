"""Canvas DSL: load RAGFlow v1 (bare or template) or our v2, convert losslessly between them.

    canvas = load_canvas(json_text_or_dict)          # v1 or v2 -> CanvasV2
    canvas, state = load_with_state(doc)             # also the run state a v1 DSL carried
    v1 = to_v1(canvas, state)                        # RAGFlow JSON (template wrapper restored)
    v2 = to_v2_dict(canvas)                          # {"version": 2, "components": ...}
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from pydantic import ValidationError

from services.orchestrator.engine.dsl.issues import ValidationIssue
from services.orchestrator.engine.dsl.model import Canvas, CanvasV2, ComponentV2
from services.orchestrator.engine.dsl.v1 import DslError, v1_to_v2, v2_to_v1
from services.orchestrator.engine.state import SessionState

__all__ = ["Canvas", "CanvasV2", "ComponentV2", "DslError", "ValidationIssue", "is_v2",
           "load_canvas", "load_with_state", "to_v1", "to_v2_dict"]


def _as_dict(source: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    if isinstance(source, (str, bytes, bytearray)):
        try:
            source = json.loads(source)
        except ValueError as exc:
            raise DslError("<document>", f"not valid JSON: {exc}") from None
    if not isinstance(source, Mapping):
        raise DslError("<document>", "a canvas must be a JSON object")
    return source


def is_v2(doc: Mapping[str, Any]) -> bool:
    return doc.get("version") == 2 and isinstance(doc.get("components"), dict)


def load_with_state(source: Mapping[str, Any] | str | bytes) -> tuple[CanvasV2, SessionState]:
    doc = _as_dict(source)
    if is_v2(doc):
        try:
            canvas = CanvasV2.model_validate(doc)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise DslError(where, err["msg"]) from None
        return canvas, SessionState.fresh(canvas.variables)
    return v1_to_v2(doc)


def load_canvas(source: Mapping[str, Any] | str | bytes) -> CanvasV2:
    return load_with_state(source)[0]


def to_v1(canvas: CanvasV2, state: SessionState | None = None) -> dict[str, Any]:
    return v2_to_v1(canvas, state)


def to_v2_dict(canvas: CanvasV2) -> dict[str, Any]:
    return canvas.model_dump(mode="json")
