"""The LLM gateway's contract as plain dataclasses: what its callers send and get back (no protobuf here).

They live with the client (services/clients/llm.py) so that a caller needs no server code; the gateway
and its providers use the same types (services/llm_gateway/models.py adds the provider-side `ChatCall`).
`merge_deltas` is what the token stream's coalescing joins neighbours with (services/common/coalesce.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ModelType = Literal["chat", "embedding", "rerank"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
ToolChoiceMode = Literal["auto", "none", "required"]


@dataclass(frozen=True)
class ToolCall:
    """A complete tool call: `arguments` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""  # tool messages: the call this result answers
    name: str = ""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ForceTool:
    """tool_choice that forces one named function."""

    name: str


ToolChoice = ToolChoiceMode | ForceTool


@dataclass(frozen=True)
class ResponseFormat:
    type: Literal["text", "json_object", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    name: str = "response"
    strict: bool = False


@dataclass(frozen=True)
class Sampling:
    """Unset (None) values are not sent to the provider, so its defaults apply."""

    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed tool call; pieces with the same index concatenate (see `ToolCallAssembler`)."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class ChatDelta:
    """One streamed chunk. The last chunk of a turn carries `finish_reason` (and `usage` when known)."""

    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    # First chunk only: the gateway ran another model than the one asked for (TRELLIS_MODEL_FALLBACK), and why.
    notice: str = ""


@dataclass(frozen=True)
class ChatResult:
    """A whole turn, assembled from its deltas."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason | None
    usage: Usage
    model: str = ""
    notice: str = ""  # the gateway ran another model than the one asked for (ChatDelta.notice)


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]]
    prompt_tokens: int = 0
    model: str = ""  # the model id the gateway resolved the request to (filled in by the client)

    @property
    def dimension(self) -> int:
        return len(self.vectors[0]) if self.vectors else 0


@dataclass(frozen=True)
class RerankScore:
    index: int
    score: float


class ToolCallAssembler:
    """Joins streamed tool-call deltas into complete calls, keyed by index.

    Providers send the id and name once (some repeat them on every piece) and split the arguments
    anywhere, even inside a JSON string; concatenating the argument pieces per index in arrival order
    restores the text exactly.
    """

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]

    def add(self, delta: ToolCallDelta) -> None:
        call = self._calls.setdefault(delta.index, ["", "", ""])
        if delta.id and not call[0]:
            call[0] = delta.id
        if delta.name and not call[1]:
            call[1] = delta.name
        call[2] += delta.arguments

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(id=c[0] or f"call_{i}", name=c[1], arguments=c[2] or "{}") for i, c in sorted(self._calls.items())
        )


def assemble(deltas: list[ChatDelta], model: str = "") -> ChatResult:
    """The whole turn that `deltas` stream."""
    whole = whole_turn(deltas)
    calls = tuple(ToolCall(tc.id, tc.name, tc.arguments) for tc in whole.tool_calls)
    return ChatResult(whole.content, calls, whole.finish_reason, whole.usage or Usage(), model, whole.notice)


def whole_turn(deltas: list[ChatDelta]) -> ChatDelta:
    """The turn that `deltas` stream as one delta: the content joined, one delta per tool call (assembled,
    so with its id, name and whole arguments), the last finish reason and usage, the first notice."""
    tools = ToolCallAssembler()
    finish: FinishReason | None = None
    usage: Usage | None = None
    notice = ""
    for d in deltas:
        for tc in d.tool_calls:
            tools.add(tc)
        finish = d.finish_reason or finish
        usage = d.usage or usage
        notice = notice or d.notice
    calls = tuple(ToolCallDelta(i, c.id, c.name, c.arguments) for i, c in enumerate(tools.calls()))
    return ChatDelta("".join(d.content for d in deltas), calls, finish, usage, notice)


def merge_deltas(a: ChatDelta, b: ChatDelta) -> ChatDelta | None:
    """`a` then `b` as one delta, or None when they must stay apart (see services/common/coalesce.py).

    Order within a delta is content, then tool calls, then the finish: so nothing joins a delta that has
    finished, and text never joins after tool calls. A tool call's argument pieces with the same index
    concatenate, exactly as `ToolCallAssembler` would join them."""
    if a.finish_reason is not None or a.usage is not None or (a.tool_calls and b.content):
        return None
    calls = a.tool_calls
    if b.tool_calls:
        joined = list(calls)
        for tc in b.tool_calls:
            last = joined[-1] if joined else None
            if last is not None and last.index == tc.index and not tc.id and not tc.name:
                joined[-1] = ToolCallDelta(last.index, last.id, last.name, last.arguments + tc.arguments)
            else:
                joined.append(tc)
        calls = tuple(joined)
    return ChatDelta(a.content + b.content, calls, b.finish_reason, b.usage, a.notice or b.notice)
