"""The chaos suite's model: an OpenAI-compatible chat server that knows which run and which component each
request is for, counts them, and signs each answer with its number.

A canvas's LLM components send the system prompt `component <id>` and the user's message `run <nonce> ...`
(chaos/load.py makes each client's query carry a nonce of its own), so the server reads (nonce, component)
off every request: the component from the system prompt, the nonce from the last user message. The answer streams one token a chunk, paced by the model name `chaos-<tokens>-<ms>`, and
ends with the tag `[<nonce> <component> #<n>]`: n is the request's number for that pair. A component's final
output therefore says which request produced it, and a request numbered past it means the component ran again
after it had finished (chaos/invariants.py).

    server = ModelServer(); base_url = await server.start()   # ".../v1"
    server.requests[(nonce, "LLM:b")]   # how many requests came for that run's component
    server.in_flight                    # answers being streamed now
"""

from __future__ import annotations

import asyncio
import collections
import re

import orjson
from aiohttp import web

TOKEN = "qz "
_RUN = re.compile(r"\brun (\S+)")
_COMPONENT = re.compile(r"\bcomponent (\S+)")


def shape(model: str) -> tuple[int, float]:
    """(tokens, seconds between tokens) of `chaos-<tokens>-<ms>`; 10 unpaced tokens otherwise."""
    parts = model.split("-")
    try:
        return int(parts[1]), int(parts[2]) / 1000.0
    except (IndexError, ValueError):
        return 10, 0.0


def reply_text(nonce: str, component: str, number: int, tokens: int) -> str:
    """What request `number` for (nonce, component) answers: what its component's output then is."""
    return TOKEN * tokens + f"[{nonce} {component} #{number}]"


def tag_number(text: str, nonce: str, component: str) -> int | None:
    """The request number an output carries for (nonce, component), or None."""
    found = re.search(re.escape(f"[{nonce} {component} #") + r"(\d+)\]", text)
    return int(found.group(1)) if found else None


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    return b"data: " + orjson.dumps({"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "created": 0,
                                     "model": "chaos", "choices": [{"index": 0, "delta": delta,
                                                                    "finish_reason": finish}]}) + b"\n\n"


class ModelServer:
    def __init__(self) -> None:
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.completed: collections.Counter[tuple[str, str]] = collections.Counter()  # answers sent to the end
        self.in_flight = 0
        self.total = 0
        self._runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.port = bound
        return f"http://127.0.0.1:{bound}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def last_number(self, nonce: str, component: str) -> int:
        return self.requests[(nonce, component)]

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        messages = body.get("messages", [])
        system = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
        users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
        # the last user message is this turn's (a session's earlier turns may come before it as history)
        run, component = _RUN.search(users[-1] if users else ""), _COMPONENT.search(system)
        key = (run.group(1) if run else "?", component.group(1) if component else "?")
        self.requests[key] += 1
        self.total += 1
        number = self.requests[key]
        tokens, pace = shape(str(body.get("model", "")))
        answer = reply_text(key[0], key[1], number, tokens)
        if not body.get("stream"):
            self.completed[key] += 1
            return web.json_response({"id": "chatcmpl-chaos", "object": "chat.completion", "created": 0,
                                      "model": "chaos", "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": answer}}],
                                      "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                                                "total_tokens": tokens + 5}})
        self.in_flight += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            await resp.write(_chunk(""))
            for piece in [TOKEN] * tokens + [answer[len(TOKEN) * tokens:]]:
                await resp.write(_chunk(piece))
                if pace:
                    await asyncio.sleep(pace)
            await resp.write(_chunk(None, "stop"))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.completed[key] += 1
        except ConnectionResetError:  # the caller went away (its process killed, its run abandoned): counted still
            pass
        finally:
            self.in_flight -= 1
        return resp
