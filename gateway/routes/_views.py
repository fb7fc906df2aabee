"""Orchestrator messages -> the JSON objects RAGFlow clients read (agents, versions, sessions)."""

from __future__ import annotations

from datetime import datetime, timezone
from email.utils import format_datetime
from typing import Any

from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import session_service_pb2 as session_pb

from gateway.dialects._common import loads, ts_ms
from gateway.dialects.ragflow import ok

__all__ = ["ok", "agent_view", "version_view", "message_view", "session_view"]


def _date(ms: int) -> str | None:
    """RAGFlow's *_date fields, as its JSON encoder writes datetimes: `Thu, 28 Aug 2025 10:00:00 GMT`."""
    if not ms:
        return None
    return format_datetime(datetime.fromtimestamp(ms / 1000, tz=timezone.utc), usegmt=True)


def _times(created: Any, updated: Any) -> dict[str, Any]:
    c, u = ts_ms(created), ts_ms(updated)
    return {"create_time": c, "create_date": _date(c), "update_time": u or c, "update_date": _date(u or c)}


def agent_view(a: agent_pb.Agent, *, include_dsl: bool = True) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": a.id, "title": a.title, "description": a.description or None, "avatar": None,
        "canvas_type": a.canvas_type or None, "canvas_category": a.canvas_category or "agent_canvas",
        "user_id": a.tenant_id, "permission": "me", "release": bool(a.latest_version_id),
        "latest_version_id": a.latest_version_id or None, **_times(a.created_at, a.updated_at),
    }
    if include_dsl:
        view["dsl"] = loads(a.dsl_json, {})
    return view


def version_view(v: agent_pb.AgentVersion) -> dict[str, Any]:
    view: dict[str, Any] = {"id": v.id, "agent_id": v.agent_id, "user_canvas_id": v.agent_id, "number": v.number,
                            "title": v.title, "release": True, **_times(v.created_at, v.created_at)}
    if v.dsl_json:
        view["dsl"] = loads(v.dsl_json, {})
    return view


def message_view(m: session_pb.ChatMessage) -> dict[str, Any]:
    view: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.id:
        view["id"] = m.id
    if m.created_at.seconds:
        view["created_at"] = ts_ms(m.created_at) / 1000
    if m.reference_json:
        view["reference"] = loads(m.reference_json, {})
    return view


def session_view(s: session_pb.Session) -> dict[str, Any]:
    """RAGFlow names the list `message` (ragflow-sdk 0.22 read `messages` when listing): both are sent."""
    messages = [message_view(m) for m in s.messages]
    return {
        "id": s.id, "agent_id": s.agent_id, "name": s.name, "user_id": s.user_id, "source": s.source or "agent",
        "version_id": s.version_id or None, "message": messages, "messages": messages,
        "reference": [m.get("reference", {}) for m in messages if m["role"] == "assistant"],
        **_times(s.created_at, s.updated_at),
    }
