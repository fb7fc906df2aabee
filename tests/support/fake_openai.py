"""A local OpenAI-compatible server for tests: aiohttp on 127.0.0.1, port 0, scripted per request.

    fake = FakeOpenAI()
    base_url = await fake.start()                 # "http://127.0.0.1:<port>/v1"
    fake.chat(Reply.json({...}, status=429, headers={"retry-after": "0"}), Reply.stream(text_chunks("Hi")))
    ...                                            # each chat request takes the next reply, in order
    fake.requests                                  # [(path, json body), ...] as received
    await fake.disconnected.wait()                 # set when a client hung up in the middle of a stream
    await fake.stop()

Embeddings and rerank answer deterministically unless replies are queued with `fake.embeddings(...)` /
`fake.rerank(...)`. The server runs with handler cancellation on, so a client that closes its connection
cancels the handler, which is how `disconnected` observes an upstream close.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

from aiohttp import web


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | None = None  # a JSON reply (non-streaming answer or error)
    chunks: list[dict[str, Any]] = field(default_factory=list)  # a streamed reply: SSE data objects
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # before the reply (and between chunks of a stream)
    stall_after: int | None = None  # stream: after this many chunks, go silent until the client leaves
    done: bool = True  # stream: end with "data: [DONE]"
    end_delay_s: float = 0.0  # stream: between "[DONE]" and the body's end (a server that flushes them apart)
    source: AsyncIterator[dict[str, Any]] | None = None  # a stream produced while it is sent (its own pace)

    @classmethod
    def json(cls, body: dict[str, Any], *, status: int = 200, headers: dict[str, str] | None = None, delay_s: float = 0.0) -> "Reply":
        return cls(status=status, body=body, headers=headers or {}, delay_s=delay_s)

    @classmethod
    def error(cls, status: int, message: str, *, headers: dict[str, str] | None = None) -> "Reply":
        kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_exceeded"}.get(status, "server_error")
        return cls.json({"error": {"message": message, "type": kind, "param": None, "code": None}}, status=status, headers=headers)

    @classmethod
    def stream(cls, chunks: list[dict[str, Any]], *, delay_s: float = 0.0, stall_after: int | None = None,
               end_delay_s: float = 0.0) -> "Reply":
        return cls(chunks=chunks, delay_s=delay_s, stall_after=stall_after, end_delay_s=end_delay_s)


def chunk(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def tool_delta(index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index}
    if id is not None:
        out["id"] = id
        out["type"] = "function"
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    if fn:
        out["function"] = fn
    return out


def text_chunks(text: str, *, usage: tuple[int, int] | None = (5, 2), finish: str = "stop") -> list[dict[str, Any]]:
    """A streamed text answer: a role chunk, one chunk per word, the finish chunk, then usage."""
    words = text.split(" ")
    out = [chunk(role="assistant", content="")]
    out += [chunk(w if i == 0 else " " + w) for i, w in enumerate(words)]
    out.append(chunk(finish_reason=finish))
    if usage:
        out.append(usage_chunk(*usage))
    return out


def completion(content: str | None, *, tool_calls: list[dict[str, Any]] | None = None, finish: str = "stop",
               usage: tuple[int, int] = (5, 2)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.disconnected = asyncio.Event()
        self.completed_streams = 0
        self._chat: list[Reply] = []
        self._embeddings: list[Reply] = []
        self._rerank: list[Reply] = []
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.base_url = ""
        self.headers: list[dict[str, str]] = []  # the headers of each request, as `requests`
        self.peers: list[tuple[str, int]] = []  # the client's address of each request: a reused connection repeats
        # Answers chat requests once the queued replies are used up (tests/support/scripted_openai.py).
        self.responder: Callable[[dict[str, Any]], Awaitable[Reply]] | None = None

    # -- scripting --------------------------------------------------------------------------------------
    def chat(self, *replies: Reply) -> None:
        self._chat.extend(replies)

    def embeddings(self, *replies: Reply) -> None:
        self._embeddings.extend(replies)

    def rerank(self, *replies: Reply) -> None:
        self._rerank.extend(replies)

    def chat_requests(self) -> list[dict[str, Any]]:
        return [body for path, body in self.requests if path.endswith("/chat/completions")]

    # -- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._on_chat)
        app.router.add_post("/v1/embeddings", self._on_embeddings)
        app.router.add_post("/v1/rerank", self._on_rerank)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- handlers ---------------------------------------------------------------------------------------
    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.json()
        self.requests.append((request.path, body))
        self.headers.append(dict(request.headers))
        self.peers.append(request.transport.get_extra_info("peername"))
        return body

    async def _on_chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if not self._chat and self.responder is None:
            return web.json_response({"error": {"message": "FakeOpenAI: no scripted chat reply left"}}, status=500)
        reply = self._chat.pop(0) if self._chat else await self.responder(body)  # type: ignore[misc]
        if reply.source is not None:
            return await self._relay(request, reply.source)
        if reply.delay_s and not reply.chunks:
            await asyncio.sleep(reply.delay_s)
        if not reply.chunks:
            return web.json_response(reply.body or {}, status=reply.status, headers=reply.headers)
        if not body.get("stream"):
            return web.json_response({"error": {"message": "FakeOpenAI: a stream was scripted for a non-streaming request"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            for i, data in enumerate(reply.chunks):
                if reply.stall_after is not None and i >= reply.stall_after:
                    await asyncio.sleep(3600)  # silent until the client goes away (handler cancelled)
                if i and reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                await resp.write(f"data: {json.dumps(data)}\n\n".encode())
            if reply.done:
                await resp.write(b"data: [DONE]\n\n")
            await asyncio.sleep(reply.end_delay_s)
            await resp.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnected.set()
            raise
        self.completed_streams += 1
        return resp

    async def _relay(self, request: web.Request, source: AsyncIterator[dict[str, Any]]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async for data in source:
            await resp.write(f"data: {json.dumps(data)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.completed_streams += 1
        return resp

    async def _on_embeddings(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if self._embeddings:
            reply = self._embeddings.pop(0)
            return web.json_response(reply.body or {}, status=reply.status, headers=reply.headers)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": _vector(t)} for i, t in enumerate(texts)]
        tokens = sum(len(t.split()) for t in texts)
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def _on_rerank(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if self._rerank:
            reply = self._rerank.pop(0)
            return web.json_response(reply.body or {}, status=reply.status, headers=reply.headers)
        query = set(body["query"].lower().split())
        results = [
            {"index": i, "relevance_score": len(query & set(d.lower().split())) / max(len(query), 1)}
            for i, d in enumerate(body["documents"])
        ]
        results.sort(key=lambda r: -r["relevance_score"])
        return web.json_response({"results": results[: body.get("top_n") or None]})


def _vector(text: str) -> list[float]:
    """8 numbers that depend on the text: the counts of a, e, i, o, u, t, s and the length."""
    t = text.lower()
    return [float(t.count(c)) for c in "aeiouts"] + [float(len(t))]
