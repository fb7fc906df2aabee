"""A scripted OpenAI-compatible model server for the pipeline benchmark: one token per SSE chunk.

    python bench/model_server.py --port 8099 [--reuse-port] [--uvloop]

The model name says what to send: `bench-<tokens>-<ms per token>` (`bench-200-10`: 200 tokens, one every
10 ms; `bench-4000-0`: 4,000 tokens as fast as the socket takes them). Each token is `qz ` so a client can
count tokens in any framing by counting `qz`. `stream: false` gets the whole answer in one JSON body.
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
from aiohttp import web

TOKEN = "qz "
_CHUNK = (b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
          b'"choices":[{"index":0,"delta":{"content":"qz "},"finish_reason":null}]}\n\n')
_FINISH = (b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
           b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')


def shape(model: str) -> tuple[int, float]:
    """(tokens, seconds between tokens) from `bench-<tokens>-<ms>`; 20 unpaced tokens otherwise."""
    parts = model.split("-")
    try:
        return int(parts[1]), int(parts[2]) / 1000.0
    except (IndexError, ValueError):
        return 20, 0.0


async def chat(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    tokens, pace = shape(str(body.get("model", "")))
    usage = {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": tokens + 5}
    if not body.get("stream"):
        return web.json_response({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": TOKEN * tokens}, "finish_reason": "stop"}],
            "usage": usage}, dumps=lambda o: orjson.dumps(o).decode())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    write = resp.write
    for _ in range(tokens):
        await write(_CHUNK)
        if pace:
            await asyncio.sleep(pace)
    await write(_FINISH)
    if (body.get("stream_options") or {}).get("include_usage"):
        await write(b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
                    b'"choices":[],"usage":' + orjson.dumps(usage) + b"}\n\n")
    await write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reuse-port", action="store_true", help="several processes share the port (SO_REUSEPORT)")
    parser.add_argument("--uvloop", action="store_true", help="on uvloop, as the services run (thousands of streams)")
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    # A backlog for thousands of clients connecting at once (bench/held_streams_bench.py), as the gateway's.
    loop = None
    if args.uvloop:
        import uvloop

        loop = uvloop.new_event_loop()
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None, backlog=4096,
                reuse_port=args.reuse_port or None, loop=loop)


if __name__ == "__main__":
    main()
