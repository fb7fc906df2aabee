"""Scripted provider: deterministic replies, tool calls, delays and errors, for tests and demos.

Model ids are "<name>@Scripted". A script book names the models; load it from a YAML or JSON file
(`TRELLIS_LLM_SCRIPTS=path`) or hand it over in process: `ScriptedProvider(ScriptBook.parse({...}))`, or
`LlmGateway.create(cfg, scripts={...})`. Example (YAML)::

    chat:
      researcher:                  # "researcher@Scripted"
        turns:                     # step i answers a request holding i assistant messages (the last repeats)
          - tool_calls:            # turn 0: call two tools at once
              - {name: web_search, arguments: {query: "trellis"}}
              - {name: calc, arguments: {expr: "6*7"}, id: call_b}
            delay_s: 0.2
          - reply: "Here is what I found: {last_tool}"
        rules:                     # checked before `turns`, in order; the first whose `when` holds answers
          - when: {last_role: tool, contains: "error"}
            reply: "The tool failed: {last_tool}"
      echo: ["{last_user}"]        # shorthand: a list of steps = turns; a string step = a reply
    embedding:
      bow: {dimension: 64}         # "bow@Scripted": bag-of-words hashing vectors, unit length
    rerank:
      overlap: {}                  # "overlap@Scripted": share of query words found in the document

Step fields:
  reply           text, streamed a word per chunk (or `chunk_chars` characters); placeholders
                  {last_user} {last_tool} {last} {turn} are filled from the request
  tool_calls      [{name, arguments (object or JSON text), id (default "call_<turn>_<i>")}]; each call's
                  arguments arrive split over two chunks, as real providers do
  error           {code: <gRPC status name>, message, times}: fail like a provider; with `times: n` only
                  the first n requests that reach this step fail, later ones get the step's reply/tool calls
  delay_s         seconds before the first chunk; chunk_delay_s: seconds between chunks
  finish_reason   default "tool_calls" when the step calls tools, else "stop"
  usage           {prompt_tokens, completion_tokens}; default: word counts
`when` fields (all that are given must hold): turn (int), last_role, contains (in the last message),
any_contains (any message), system_contains, has_tools (bool), tool_choice ("auto"|"none"|"required"|a
function name). Matching is case-insensitive.

The step depends only on the request (and the `times` counters), never on timing or on other requests, so
concurrent agents get the same answers in any order. Every request is recorded in `provider.calls` as
`(name, ChatCall)`, so a test can assert what the model was shown.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import grpc
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.common.errors import InvalidArgument, ServiceError
from services.llm_gateway.errors import ModelNotFound
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers_file import describe
from services.llm_gateway.models import (
    ChatCall,
    ChatDelta,
    Embeddings,
    ForceTool,
    Message,
    RerankScore,
    ToolCallDelta,
    Usage,
)

_RETRYABLE_CODES = {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedToolCall(_Model):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str = ""


class ScriptedError(_Model):
    code: str = "UNAVAILABLE"
    message: str = "scripted provider failure"
    times: int = 0  # 0: every time

    @model_validator(mode="after")
    def _known_code(self) -> "ScriptedError":
        if self.code not in grpc.StatusCode.__members__ or self.code == "OK":
            raise ValueError(f"error.code {self.code!r} is not a gRPC status name such as UNAVAILABLE")
        return self


class When(_Model):
    turn: int | None = None
    last_role: str | None = None
    contains: str | None = None
    any_contains: str | None = None
    system_contains: str | None = None
    has_tools: bool | None = None
    tool_choice: str | None = None


class ScriptedUsage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Step(_Model):
    when: When | None = None
    reply: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    error: ScriptedError | None = None
    delay_s: float = Field(0.0, ge=0)
    chunk_delay_s: float = Field(0.0, ge=0)
    chunk_chars: int = Field(0, ge=0)
    finish_reason: str | None = None
    usage: ScriptedUsage | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"reply": value} if isinstance(value, str) else value


class ChatScript(_Model):
    turns: list[Step] = Field(default_factory=list)
    rules: list[Step] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        return {"turns": value} if isinstance(value, list) else value


class EmbeddingScript(_Model):
    dimension: int = Field(64, gt=0, le=8192)


class ScriptBook(_Model):
    chat: dict[str, ChatScript] = Field(default_factory=dict)
    embedding: dict[str, EmbeddingScript] = Field(default_factory=dict)
    rerank: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def parse(cls, data: Any, *, source: str = "scripts") -> "ScriptBook":
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidArgument(f"llm_gateway: {source}: {describe(exc)}") from None

    @classmethod
    def load(cls, path: Path) -> "ScriptBook":
        try:
            text = path.read_text()
        except OSError as exc:
            raise SystemExit(f"llm_gateway: cannot read TRELLIS_LLM_SCRIPTS file {path}: {exc}") from None
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise SystemExit(f"llm_gateway: TRELLIS_LLM_SCRIPTS file {path} is not valid JSON/YAML: {exc}") from None
        try:
            return cls.parse(data or {}, source=str(path))
        except InvalidArgument as exc:
            raise SystemExit(exc.message) from None


class ScriptedProvider(Provider):
    kind = "scripted"

    def __init__(self, book: ScriptBook) -> None:
        self.book = book
        self.calls: list[tuple[str, ChatCall]] = []
        self._error_hits: dict[tuple[str, int, int], int] = {}  # (model, rule/turn, index) -> failures served

    async def stream(self, call: ChatCall, *, timeout: float) -> AsyncIterator[ChatDelta]:
        script = self.book.chat.get(call.model)
        if script is None:
            raise ModelNotFound(f"scripted model {call.model!r} is not in the script book")
        self.calls.append((call.model, call))
        turn = sum(1 for m in call.messages if m.role == "assistant")
        key, step = _pick(script, call, turn)
        if step is None:
            raise ServiceError(
                f"scripted model {call.model!r} has no step for this request (turn {turn})",
                code=grpc.StatusCode.FAILED_PRECONDITION,
            )
        if step.delay_s:
            await asyncio.sleep(step.delay_s)
        if step.error is not None and self._should_fail(call.model, key, step.error):
            raise ServiceError(
                f"Scripted {call.model}: {step.error.message}",
                code=grpc.StatusCode[step.error.code],
                retryable=step.error.code in _RETRYABLE_CODES,
            )
        async for delta in _play(step, call, turn):
            yield delta

    def _should_fail(self, model: str, key: tuple[int, int], error: ScriptedError) -> bool:
        hits = self._error_hits.get((model, *key), 0)
        if error.times and hits >= error.times:
            return False
        self._error_hits[(model, *key)] = hits + 1
        return True

    async def embed(self, model: str, texts: Sequence[str], *, timeout: float) -> Embeddings:
        spec = self.book.embedding.get(model)
        if spec is None:
            raise ModelNotFound(f"scripted embedding model {model!r} is not in the script book")
        return Embeddings([_hash_vector(t, spec.dimension) for t in texts], sum(len(_words(t)) for t in texts))

    def has_rerank(self, model: str) -> bool:
        return model in self.book.rerank

    async def rerank(
        self, model: str, query: str, documents: Sequence[str], *, top_n: int, timeout: float
    ) -> list[RerankScore]:
        q = set(_words(query))
        scores = [RerankScore(i, len(q & set(_words(d))) / len(q) if q else 0.0) for i, d in enumerate(documents)]
        return scores


def _pick(script: ChatScript, call: ChatCall, turn: int) -> tuple[tuple[int, int], Step | None]:
    for i, rule in enumerate(script.rules):
        if rule.when is None or _holds(rule.when, call, turn):
            return (0, i), rule
    if script.turns:
        i = min(turn, len(script.turns) - 1)
        return (1, i), script.turns[i]
    return (1, -1), None


def _holds(when: When, call: ChatCall, turn: int) -> bool:
    msgs = call.messages
    last = msgs[-1] if msgs else Message(role="user")
    choice = call.tool_choice.name if isinstance(call.tool_choice, ForceTool) else (call.tool_choice or "auto")
    checks = [
        when.turn is None or when.turn == turn,
        when.last_role is None or when.last_role.lower() == last.role,
        when.contains is None or when.contains.lower() in last.content.lower(),
        when.any_contains is None or any(when.any_contains.lower() in m.content.lower() for m in msgs),
        when.system_contains is None
        or any(when.system_contains.lower() in m.content.lower() for m in msgs if m.role == "system"),
        when.has_tools is None or when.has_tools == bool(call.tools),
        when.tool_choice is None or when.tool_choice.lower() == choice.lower(),
    ]
    return all(checks)


def _fill(text: str, call: ChatCall, turn: int) -> str:
    def last_of(role: str) -> str:
        return next((m.content for m in reversed(call.messages) if m.role == role), "")

    values = {
        "{last_user}": last_of("user"),
        "{last_tool}": last_of("tool"),
        "{last}": call.messages[-1].content if call.messages else "",
        "{turn}": str(turn),
    }
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


async def _play(step: Step, call: ChatCall, turn: int) -> AsyncIterator[ChatDelta]:
    text = _fill(step.reply, call, turn)
    pieces: list[ChatDelta] = []
    if text:
        size = step.chunk_chars
        chunks = [text[i : i + size] for i in range(0, len(text), size)] if size else re.findall(r"\s*\S+\s*", text)
        pieces += [ChatDelta(content=c) for c in chunks or [text]]
    for i, tc in enumerate(step.tool_calls):
        args = tc.arguments if isinstance(tc.arguments, str) else json.dumps(tc.arguments)
        cut = len(args) // 2
        pieces.append(ChatDelta(tool_calls=(ToolCallDelta(i, tc.id or f"call_{turn}_{i}", tc.name, args[:cut]),)))
        pieces.append(ChatDelta(tool_calls=(ToolCallDelta(i, arguments=args[cut:]),)))
    for n, piece in enumerate(pieces):
        if n and step.chunk_delay_s:
            await asyncio.sleep(step.chunk_delay_s)
        yield piece
    finish = step.finish_reason or ("tool_calls" if step.tool_calls else "stop")
    if step.usage is not None:
        usage = Usage(step.usage.prompt_tokens, step.usage.completion_tokens)
    else:
        prompt = sum(len(_words(m.content)) for m in call.messages)
        completion = len(_words(text)) + sum(len(_words(str(tc.arguments))) + 1 for tc in step.tool_calls)
        usage = Usage(prompt, completion)
    yield ChatDelta(finish_reason=finish if finish in _FINISH_REASONS else "stop", usage=usage)


_FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter"}


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _hash_vector(text: str, dimension: int) -> list[float]:
    # blake2b, not hash(): the same text must give the same vector in every process.
    vec = [0.0] * dimension
    for word in _words(text):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vec[h % dimension] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm else vec
