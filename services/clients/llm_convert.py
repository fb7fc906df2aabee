"""`trellis.llm.v1` messages <-> the contract's dataclasses (services/clients/llm_models.py), caller side.

The enum tables are the one spelling of each enum on both sides: services/llm_gateway/convert.py, the
gateway's direction (which also checks what callers send), reads them from here.
`delta_from_proto` runs once per streamed chunk: it builds the one `ChatDelta` and nothing else.
"""

from __future__ import annotations

import json
from typing import Sequence

from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.clients.llm_models import (
    ChatDelta,
    FinishReason,
    ForceTool,
    Message,
    ModelType,
    ResponseFormat,
    Role,
    Sampling,
    Tool,
    ToolCallDelta,
    ToolChoice,
    Usage,
)

ROLES: dict[int, Role] = {
    chat_pb.ROLE_SYSTEM: "system",
    chat_pb.ROLE_USER: "user",
    chat_pb.ROLE_ASSISTANT: "assistant",
    chat_pb.ROLE_TOOL: "tool",
}
ROLES_PB = {v: k for k, v in ROLES.items()}
FINISH_PB: dict[FinishReason, int] = {
    "stop": chat_pb.FINISH_REASON_STOP,
    "length": chat_pb.FINISH_REASON_LENGTH,
    "tool_calls": chat_pb.FINISH_REASON_TOOL_CALLS,
    "content_filter": chat_pb.FINISH_REASON_CONTENT_FILTER,
}
FINISH = {v: k for k, v in FINISH_PB.items()}
CHOICE_MODES = {
    chat_pb.TOOL_CHOICE_MODE_AUTO: "auto",
    chat_pb.TOOL_CHOICE_MODE_NONE: "none",
    chat_pb.TOOL_CHOICE_MODE_REQUIRED: "required",
}
CHOICE_MODES_PB = {v: k for k, v in CHOICE_MODES.items()}
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
RERANK_METHODS = {v: k for k, v in RERANK_METHODS_PB.items()}
_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed")


def chat_request_to_proto(
    model_id: str,
    messages: Sequence[Message],
    *,
    tools: Sequence[Tool] = (),
    tool_choice: ToolChoice | None = None,
    response_format: ResponseFormat | None = None,
    sampling: Sampling = Sampling(),
    max_tokens: int = 0,
    stop: Sequence[str] = (),
) -> llm_pb.ChatRequest:
    req = llm_pb.ChatRequest(model_id=model_id, max_tokens=max_tokens, stop=list(stop))
    for m in messages:
        pm = req.messages.add(role=ROLES_PB[m.role], content=m.content, tool_call_id=m.tool_call_id, name=m.name)
        for c in m.tool_calls:
            pm.tool_calls.add(id=c.id, name=c.name, arguments_json=c.arguments)
    for t in tools:
        req.tools.add(name=t.name, description=t.description, parameters_json=json.dumps(t.parameters))
    if isinstance(tool_choice, ForceTool):
        req.tool_choice.function_name = tool_choice.name
    elif tool_choice is not None:
        req.tool_choice.mode = CHOICE_MODES_PB[tool_choice]
    fmt = response_format
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
    for name in _SAMPLING:
        value = getattr(sampling, name)
        if value is not None:
            setattr(req.sampling, name, value)
    return req


def delta_from_proto(r: llm_pb.ChatResponse) -> ChatDelta:
    return ChatDelta(
        content=r.content_delta,
        tool_calls=tuple(ToolCallDelta(t.index, t.id, t.name, t.arguments_delta) for t in r.tool_call_deltas)
        if r.tool_call_deltas else (),
        finish_reason=FINISH.get(r.finish_reason),  # type: ignore[arg-type]
        usage=Usage(r.usage.prompt_tokens, r.usage.completion_tokens) if r.HasField("usage") else None,
        notice=r.notice,
    )
