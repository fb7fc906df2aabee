"""The scripted provider's script book, served over the OpenAI API: FakeOpenAI's `responder` that reads each
/v1/chat/completions request back into a ChatCall, plays the book's script for it (the same
`ScriptedProvider` the llm_gateway runs, so a test's scripts mean the same in both places) and answers as
OpenAI does: a streamed SSE answer (role chunk, text pieces, tool-call deltas, finish reason, usage when
`stream_options.include_usage` asks for it) or one JSON completion; a scripted error is an HTTP error.

    fake.responder = ScriptedOpenAI(scripts, {"kimi-k2.5": "analyst"})   # upstream model name -> script
    fake.responder.calls_to("analyst")                                  # ChatCalls, as read off the wire
"""
from __future__ import annotations

from typing import Any, AsyncIterator

import grpc

from services.common.errors import ServiceError
from services.llm_gateway.models import (ChatCall, ChatDelta, ForceTool, Message, ResponseFormat, Sampling, Tool,
                                         ToolCall)
from services.llm_gateway.providers.scripted import ScriptBook, ScriptedProvider
from tests.support.fake_openai import Reply, completion

_HTTP_STATUS = {grpc.StatusCode.RESOURCE_EXHAUSTED: 429, grpc.StatusCode.UNAVAILABLE: 503,
                grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.UNAUTHENTICATED: 401,
                grpc.StatusCode.NOT_FOUND: 404}


class ScriptedOpenAI:
    def __init__(self, scripts: Any, names: dict[str, str]) -> None:
        self.provider = ScriptedProvider(ScriptBook.parse(scripts or {}))
        self.names = names  # the model name a request carries -> the script that answers it

    def calls_to(self, script: str) -> list[ChatCall]:
        return [c for n, c in self.provider.calls if n == script]

    async def __call__(self, body: dict[str, Any]) -> Reply:
        model = str(body.get("model", ""))
        if model not in self.names:
            return Reply.error(404, f"The model `{model}` does not exist (serving: {', '.join(sorted(self.names))})")
        deltas = self.provider.stream(chat_call(body, self.names[model]), timeout=30)
        try:
            first = await deltas.__anext__()
        except ServiceError as exc:
            return Reply.error(_HTTP_STATUS.get(exc.code, 500), exc.message)
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return Reply(source=_chunks(model, first, deltas, usage))
        return Reply.json(await _completion(first, deltas))


def chat_call(body: dict[str, Any], model: str) -> ChatCall:
    """The request body read back into the domain call (services/llm_gateway/providers/_openai_format.py
    is the other direction)."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = ForceTool(choice["function"]["name"])
    fmt = body.get("response_format") or {}
    return ChatCall(
        model=model,
        messages=tuple(_message(m) for m in body.get("messages", [])),
        tools=tuple(Tool(t["function"]["name"], t["function"].get("description", ""),
                         t["function"].get("parameters") or {}) for t in body.get("tools") or []),
        tool_choice=choice,
        response_format=ResponseFormat(fmt["type"], (fmt.get("json_schema") or {}).get("schema")) if fmt else None,
        sampling=Sampling(**{k: body[k] for k in ("temperature", "top_p", "presence_penalty", "frequency_penalty",
                                                  "seed") if body.get(k) is not None}),
        max_tokens=int(body.get("max_tokens") or 0),
        stop=tuple(body.get("stop") or ()),
    )


def _message(m: dict[str, Any]) -> Message:
    content = m.get("content") or ""
    if isinstance(content, list):  # content parts: the text ones
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = tuple(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or [])
    return Message(role=m["role"], content=content, tool_calls=calls, tool_call_id=m.get("tool_call_id", ""),
                   name=m.get("name", ""))


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def _chunks(model: str, first: ChatDelta, rest: AsyncIterator[ChatDelta],
                  usage: bool) -> AsyncIterator[dict[str, Any]]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    delta: ChatDelta | None = first
    while delta is not None:
        if delta.content:
            yield _chunk(model, {"content": delta.content})
        if delta.tool_calls:
            yield _chunk(model, {"tool_calls": [_tool_delta(t) for t in delta.tool_calls]})
        if delta.finish_reason:
            yield _chunk(model, {}, delta.finish_reason)
        if delta.usage is not None and usage:
            u = delta.usage
            yield {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
                   "choices": [], "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                                            "total_tokens": u.prompt_tokens + u.completion_tokens}}
        delta = await anext(rest, None)


def _tool_delta(t: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"index": t.index, "function": {"arguments": t.arguments}}
    if t.id:
        out.update(id=t.id, type="function")
        out["function"]["name"] = t.name
    return out


async def _completion(first: ChatDelta, rest: AsyncIterator[ChatDelta]) -> dict[str, Any]:
    deltas = [first] + [d async for d in rest]
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        for t in d.tool_calls:
            call = calls.setdefault(t.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or t.id
            call["name"] = call["name"] or t.name
            call["arguments"] += t.arguments
    usage = next((d.usage for d in deltas if d.usage is not None), None)
    finish = next((d.finish_reason for d in deltas if d.finish_reason), "stop")
    tool_calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                  for _, c in sorted(calls.items())]
    return completion("".join(d.content for d in deltas) or None, tool_calls=tool_calls or None, finish=finish,
                      usage=(usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0))


__all__ = ["ScriptedOpenAI", "chat_call"]
