"""Protobuf <-> domain types, the gateway's direction: requests in, deltas out. The callers' direction and
the enum tables both sides share are services/clients/llm_convert.py.

Bad input fails here with INVALID_ARGUMENT naming the field, before any provider is called.
"""

from __future__ import annotations

import json
from typing import Any

from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.clients.llm_convert import CHOICE_MODES, FINISH_PB, MODEL_TYPES, MODEL_TYPES_PB, RERANK_METHODS_PB, ROLES
from services.common.errors import InvalidArgument
from services.llm_gateway.models import (
    ChatCall,
    ChatDelta,
    ForceTool,
    Message,
    ResponseFormat,
    Sampling,
    Tool,
    ToolCall,
    ToolChoice,
    Usage,
)

__all__ = ["MODEL_TYPES", "MODEL_TYPES_PB", "RERANK_METHODS_PB", "chat_call_from_proto", "delta_to_proto", "usage_to_proto"]


def _json(text: str, field: str, *, default: Any) -> Any:
    if not text.strip():
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"Chat: {field} is not valid JSON: {exc}") from None


# -- proto -> domain (server side) ----------------------------------------------------------------------
def chat_call_from_proto(req: llm_pb.ChatRequest) -> ChatCall:
    messages = []
    for i, m in enumerate(req.messages):
        if m.role not in ROLES:
            raise InvalidArgument(f"Chat: messages[{i}].role is unset; use SYSTEM, USER, ASSISTANT or TOOL")
        if m.role == chat_pb.ROLE_TOOL and not m.tool_call_id:
            raise InvalidArgument(f"Chat: messages[{i}] is a TOOL message without tool_call_id")
        calls = tuple(ToolCall(c.id, c.name, c.arguments_json or "{}") for c in m.tool_calls)
        messages.append(Message(ROLES[m.role], m.content, calls, m.tool_call_id, m.name))
    tools = []
    for i, t in enumerate(req.tools):
        if not t.name:
            raise InvalidArgument(f"Chat: tools[{i}].name is empty")
        params = _json(t.parameters_json, f"tools[{i}].parameters_json", default={"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise InvalidArgument(f"Chat: tools[{i}].parameters_json must be a JSON object (a JSON Schema)")
        tools.append(Tool(t.name, t.description, params))
    choice: ToolChoice | None = None
    which = req.tool_choice.WhichOneof("choice") if req.HasField("tool_choice") else None
    if which == "function_name":
        choice = ForceTool(req.tool_choice.function_name)
    elif which == "mode" and req.tool_choice.mode in CHOICE_MODES:
        choice = CHOICE_MODES[req.tool_choice.mode]  # type: ignore[assignment]
    fmt = None
    if req.HasField("response_format"):
        rf = req.response_format
        if rf.type == chat_pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT:
            fmt = ResponseFormat("json_object")
        elif rf.type == chat_pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
            schema = _json(rf.json_schema, "response_format.json_schema", default=None)
            if not isinstance(schema, dict):
                raise InvalidArgument("Chat: response_format.json_schema must hold a JSON Schema object for JSON_SCHEMA")
            fmt = ResponseFormat("json_schema", schema, rf.schema_name or "response", rf.strict)
    s = req.sampling
    sampling = Sampling(
        temperature=s.temperature if s.HasField("temperature") else None,
        top_p=s.top_p if s.HasField("top_p") else None,
        presence_penalty=s.presence_penalty if s.HasField("presence_penalty") else None,
        frequency_penalty=s.frequency_penalty if s.HasField("frequency_penalty") else None,
        seed=s.seed if s.HasField("seed") else None,
    )
    return ChatCall(
        model="",
        messages=tuple(messages),
        tools=tuple(tools),
        tool_choice=choice,
        response_format=fmt,
        sampling=sampling,
        max_tokens=req.max_tokens,
        stop=tuple(req.stop),
    )


def delta_to_proto(d: ChatDelta, model: str = "", notice: str = "") -> llm_pb.ChatResponse:
    out = llm_pb.ChatResponse(content_delta=d.content, model=model, notice=notice or d.notice)
    for tc in d.tool_calls:
        out.tool_call_deltas.add(index=tc.index, id=tc.id, name=tc.name, arguments_delta=tc.arguments)
    if d.finish_reason:
        out.finish_reason = FINISH_PB[d.finish_reason]
    if d.usage is not None:
        out.usage.CopyFrom(usage_to_proto(d.usage))
    return out


def usage_to_proto(u: Usage) -> chat_pb.Usage:
    return chat_pb.Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, total_tokens=u.total_tokens)
