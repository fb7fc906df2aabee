"""Writing a server-sent event stream: headers that keep proxies from buffering, and backpressure.

Each dialect (`gateway.dialects.*.sse`) turns RunEvents into frames; `send` writes them:

    async with orch.run(run_request) as events:
        return await sse.send(request, ragflow.sse(events, run))

Every `write` awaits the socket's drain, so a slow client slows the reading of the gRPC stream, and gRPC
flow control slows the orchestrator: memory stays bounded by a few frames. A client that disconnects
cancels the handler (handler_cancellation), which closes the frame generator and cancels the gRPC call.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import AsyncIterator

from aiohttp import web

from gateway.endpoint import STREAM

HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",  # nginx and friends: pass each frame through at once
}


async def send(request: web.Request, frames: AsyncIterator[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers=HEADERS)
    await resp.prepare(request)
    request[STREAM] = resp
    async with aclosing(frames):
        async for chunk in frames:
            await resp.write(chunk)
    await resp.write_eof()
    return resp
