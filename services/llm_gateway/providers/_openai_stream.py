"""An OpenAI-compatible chat stream read as raw server-sent events: no typed object per chunk.

`deltas(byte_chunks, where)` turns the response body into ChatDeltas. Everything that arrived in one network
read becomes one delta (the provider -> gateway hop's share of services/common/coalesce.py), parsed with
orjson. Each tool call's id and name are passed on once, however often the server repeats them.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import orjson

from services.llm_gateway.errors import ProviderUnavailable
from services.llm_gateway.models import ChatDelta, FinishReason, ToolCallDelta, Usage

FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


class _Turn:
    """What the events of one stream add up to, handed out one batch at a time."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.seen_id: set[int] = set()
        self.seen_name: set[int] = set()
        self.finish: FinishReason | None = None
        self.usage: Usage | None = None
        self.done = False
        self.error: ProviderUnavailable | None = None  # raised once the deltas read before it are out
        self._text: list[str] = []
        self._calls: list[ToolCallDelta] = []
        self._held: list[ChatDelta] = []  # complete deltas of this batch, before the one being built

    def event(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProviderUnavailable(f"{self.where}: the stream sent a chunk that is not JSON: {data[:200]!r}",
                                      retryable=False) from None
        if not isinstance(chunk, dict):
            return
        if "error" in chunk and chunk["error"]:
            self.error = ProviderUnavailable(f"{self.where}: {_error_message(chunk['error'])}", retryable=False)
            self.done = True
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
        choices = chunk.get("choices")
        if not choices:
            return
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content:
            if self._calls:  # text after tool calls: keep the order by closing the batch here
                self._flush_calls_first()
            self._text.append(content)
        for pos, tc in enumerate(delta.get("tool_calls") or ()):
            self._tool_call(pos, tc)
        reason = choice.get("finish_reason")
        if reason:
            self.finish = FINISH.get(reason, "stop")

    def _tool_call(self, pos: int, tc: dict[str, Any]) -> None:
        index = tc.get("index")
        index = pos if index is None else index
        fn = tc.get("function") or {}
        call_id = tc.get("id") or ""
        name = fn.get("name") or ""
        call_id = call_id if call_id and index not in self.seen_id else ""
        name = name if name and index not in self.seen_name else ""
        if call_id:
            self.seen_id.add(index)
        if name:
            self.seen_name.add(index)
        arguments = fn.get("arguments") or ""
        last = self._calls[-1] if self._calls else None
        if last is not None and last.index == index and not call_id and not name:
            self._calls[-1] = ToolCallDelta(index, last.id, last.name, last.arguments + arguments)
        else:
            self._calls.append(ToolCallDelta(index, call_id, name, arguments))

    def _flush_calls_first(self) -> None:
        self._held.append(ChatDelta("".join(self._text), tuple(self._calls)))
        self._text, self._calls = [], []

    def take(self) -> list[ChatDelta]:
        """The deltas of the events read since the last call (usually one)."""
        out, self._held = self._held, []
        if self._text or self._calls:
            out.append(ChatDelta("".join(self._text), tuple(self._calls)))
            self._text, self._calls = [], []
        return out

    def last(self) -> ChatDelta:
        # Some servers (Ollama, older vLLM) say "stop" after calling tools; callers branch on "tool_calls".
        finish = self.finish
        if self.seen_name and finish in (None, "stop"):
            finish = "tool_calls"
        return ChatDelta(finish_reason=finish or "stop", usage=self.usage)


def _error_message(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return str(error)


async def deltas(byte_chunks: AsyncIterator[bytes], where: str) -> AsyncIterator[ChatDelta]:
    """The stream's deltas; the last one carries the finish reason (and usage when the server sent it)."""
    turn = _Turn(where)
    rest = b""
    data: list[bytes] = []
    async for raw in byte_chunks:
        lines = (rest + raw).split(b"\n")
        rest = lines.pop()  # an incomplete line waits for the next read
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if turn.done:
                break
            if not line:  # the blank line ends an event
                if data:
                    turn.event(b"\n".join(data))
                    data = []
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            # `event:`, `id:`, `retry:` and comments carry nothing a chat stream needs
        for delta in turn.take():
            yield delta
        if turn.error is not None:
            raise turn.error
        if turn.done:
            break
    if data and not turn.done:  # a server that ends without the final blank line
        turn.event(b"\n".join(data))
        for delta in turn.take():
            yield delta
        if turn.error is not None:
            raise turn.error
    yield turn.last()
