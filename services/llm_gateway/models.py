"""Domain types of the LLM gateway (no protobuf here).

The types callers exchange with the gateway are its contract, so they are defined next to the client
(services/clients/llm_models.py) and re-exported here for the gateway's own modules. `ChatCall` is the
gateway's alone: one turn as a provider receives it.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.clients.llm_models import (
    ChatDelta,
    ChatResult,
    Embeddings,
    FinishReason,
    ForceTool,
    Message,
    ModelType,
    RerankScore,
    ResponseFormat,
    Role,
    Sampling,
    Tool,
    ToolCall,
    ToolCallAssembler,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
    Usage,
    assemble,
    merge_deltas,
    whole_turn,
)

__all__ = [
    "ChatCall",
    "ChatDelta",
    "ChatResult",
    "Embeddings",
    "FinishReason",
    "ForceTool",
    "Message",
    "ModelType",
    "RerankScore",
    "ResponseFormat",
    "Role",
    "Sampling",
    "Tool",
    "ToolCall",
    "ToolCallAssembler",
    "ToolCallDelta",
    "ToolChoice",
    "ToolChoiceMode",
    "Usage",
    "assemble",
    "merge_deltas",
    "whole_turn",
]


@dataclass(frozen=True)
class ChatCall:
    """One chat turn as a provider receives it: `model` is already the provider's own model name."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None  # None: "auto" when tools are given
    response_format: ResponseFormat | None = None
    sampling: Sampling = Sampling()
    max_tokens: int = 0  # 0: the provider's default
    stop: tuple[str, ...] = ()
