"""Protobuf <-> domain types, both ways (the servicer uses one direction, `client.py` the other).

Bad input fails here with INVALID_ARGUMENT naming the field, before any provider is called.
"""

from __future__ import annotations

import json
from typing import Any

from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.errors import InvalidArgument
from services.llm_gateway.models import (
    ChatCall,
    ChatDelta,
    FinishReason,
    ForceTool,
    Message,
    ModelType,
    ResponseFormat,
    Role,
    Sampling,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    Usage,
)

_ROLES: dict[int, Role] = {
    chat_pb.ROLE_SYSTEM: "system",
    chat_pb.ROLE_USER: "user",
    chat_pb.ROLE_ASSISTANT: "assistant",
    chat_pb.ROLE_TOOL: "tool",
}
_ROLES_PB = {v: k for k, v in _ROLES.items()}
_FINISH_PB: dict[FinishReason, int] = {
    "stop": chat_pb.FINISH_REASON_STOP,
    "length": chat_pb.FINISH_REASON_LENGTH,
    "tool_calls": chat_pb.FINISH_REASON_TOOL_CALLS,
    "content_filter": chat_pb.FINISH_REASON_CONTENT_FILTER,
}
_FINISH = {v: k for k, v in _FINISH_PB.items()}
_CHOICE_MODES = {
    chat_pb.TOOL_CHOICE_MODE_AUTO: "auto",
    chat_pb.TOOL_CHOICE_MODE_NONE: "none",
    chat_pb.TOOL_CHOICE_MODE_REQUIRED: "required",
}
_CHOICE_MODES_PB = {v: k for k, v in _CHOICE_MODES.items()}
MODEL_TYPES: dict[int, ModelType] = {
    llm_pb.MODEL_TYPE_CHAT: "chat",
    llm_pb.MODEL_TYPE_EMBEDDING: "embedding",
    llm_pb.MODEL_TYPE_RERANK: "rerank",
}
MODEL_TYPES_PB = {v: k for k, v in MODEL_TYPES.items()}
RERANK_METHODS_PB = {
    "provider": llm_pb.RERANK_METHOD_PROVIDER,
    "embedding_similarity": llm_pb.RERANK_METHOD_EMBEDDING_SIMILARITY,
}


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
        if m.role not in _ROLES:
            raise InvalidArgument(f"Chat: messages[{i}].role is unset; use SYSTEM, USER, ASSISTANT or TOOL")
        if m.role == chat_pb.ROLE_TOOL and not m.tool_call_id:
            raise InvalidArgument(f"Chat: messages[{i}] is a TOOL message without tool_call_id")
        calls = tuple(ToolCall(c.id, c.name, c.arguments_json or "{}") for c in m.tool_calls)
        messages.append(Message(_ROLES[m.role], m.content, calls, m.tool_call_id, m.name))
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
    elif which == "mode" and req.tool_choice.mode in _CHOICE_MODES:
        choice = _CHOICE_MODES[req.tool_choice.mode]  # type: ignore[assignment]
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
        out.finish_reason = _FINISH_PB[d.finish_reason]
    if d.usage is not None:
        out.usage.CopyFrom(usage_to_proto(d.usage))
    return out


def usage_to_proto(u: Usage) -> chat_pb.Usage:
    return chat_pb.Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, total_tokens=u.total_tokens)


# -- domain -> proto (client side) ----------------------------------------------------------------------
def chat_request_to_proto(model_id: str, call: ChatCall) -> llm_pb.ChatRequest:
    req = llm_pb.ChatRequest(model_id=model_id, max_tokens=call.max_tokens, stop=list(call.stop))
    for m in call.messages:
        pm = req.messages.add(role=_ROLES_PB[m.role], content=m.content, tool_call_id=m.tool_call_id, name=m.name)
        for c in m.tool_calls:
            pm.tool_calls.add(id=c.id, name=c.name, arguments_json=c.arguments)
    for t in call.tools:
        req.tools.add(name=t.name, description=t.description, parameters_json=json.dumps(t.parameters))
    if isinstance(call.tool_choice, ForceTool):
        req.tool_choice.function_name = call.tool_choice.name
    elif call.tool_choice is not None:
        req.tool_choice.mode = _CHOICE_MODES_PB[call.tool_choice]
    fmt = call.response_format
    if fmt is not None and fmt.type == "json_object":
        req.response_format.type = chat_pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT
    elif fmt is not None and fmt.type == "json_schema":
        req.response_format.CopyFrom(
            chat_pb.ResponseFormat(
                type=chat_pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
                json_schema=json.dumps(fmt.schema or {}),
                schema_name=fmt.name,
                strict=fmt.strict,
            )
        )
    s = call.sampling
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed"):
        value = getattr(s, name)
        if value is not None:
            setattr(req.sampling, name, value)
    return req


def delta_from_proto(r: llm_pb.ChatResponse) -> ChatDelta:
    return ChatDelta(
        content=r.content_delta,
        tool_calls=tuple(ToolCallDelta(t.index, t.id, t.name, t.arguments_delta) for t in r.tool_call_deltas),
        finish_reason=_FINISH.get(r.finish_reason),  # type: ignore[arg-type]
        usage=Usage(r.usage.prompt_tokens, r.usage.completion_tokens) if r.HasField("usage") else None,
        notice=r.notice,
    )
