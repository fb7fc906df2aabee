"""Turning stored or submitted DSL text into a checked canvas, with errors that name component and field."""

from __future__ import annotations

from services.common.errors import InvalidArgument
from services.orchestrator.dsl import CanvasV2, DslError, load_with_state
from services.orchestrator.state import SessionState
from services.orchestrator.validate import validate


def parse(dsl_json: str, *, require_available: bool) -> tuple[CanvasV2, SessionState]:
    """Load (v1, template or v2) and validate. `require_available=False` checks structure only, so an agent
    that uses components whose issue has not landed can still be stored; running it checks everything."""
    if not dsl_json.strip():
        raise InvalidArgument("dsl is required")
    try:
        canvas, state = load_with_state(dsl_json)
    except DslError as exc:
        raise InvalidArgument(f"invalid DSL: {exc}") from None
    issues = validate(canvas, require_available=require_available)
    if issues:
        shown = "; ".join(str(i) for i in issues[:10])
        more = f" (and {len(issues) - 10} more)" if len(issues) > 10 else ""
        raise InvalidArgument(f"invalid DSL: {shown}{more}")
    return canvas, state


def prologue(canvas: CanvasV2) -> str:
    """Begin's greeting for a new session, or "" (task mode, or the prologue switched off in the UI)."""
    begin = canvas.components.get("begin")
    if begin is None:
        return ""
    params = begin.params
    if params.get("enablePrologue") is False or str(params.get("mode", "conversational")).lower() != "conversational":
        return ""
    text = params.get("prologue")
    return text if isinstance(text, str) else ""
