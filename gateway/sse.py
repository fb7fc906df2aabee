"""Writing a run's stream: headers that keep proxies from buffering, and backpressure.

Each dialect's run (`DialectRun.stream`, gateway/dialects/base.py) turns RunEvents into frames; `send`
writes them (gateway.routes._runs.respond does it for every run route):

    async with orch.run(run_request) as events:
        return await sse.send(request, run.stream(events), events, media_type=run.dialect.media_type)

Every `write` awaits the socket's drain. What the run sends meanwhile waits in its turn (runs share the
gateway's streams of turns, whose reader never waits for one caller: docs/transport.md) and goes out merged
when the write is done (gateway/orchestrator.py, services/common/coalesce.py): a slow client holds back no
other run, and its own run's output is buffered here at most. A client that disconnects cancels the handler
(handler_cancellation), which closes the frame generator and cancels the run's turn.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncIterator

from aiohttp import web

from gateway.dialects.base import SSE
from gateway.endpoint import STREAM

HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",  # nginx and friends: pass each frame through at once
}


async def send(request: web.Request, frames: AsyncIterator[bytes], ids: Any = None, *,
               media_type: str = SSE) -> web.StreamResponse:
    """With `ids` (gateway.orchestrator.EventIds), every SSE frame ends with an `id:` line naming the last event
    it holds, so a client can rejoin with Last-Event-ID (another media type has no place for one)."""
    if media_type != SSE:
        ids = None
    resp = web.StreamResponse(status=200, headers={"Content-Type": f"{media_type}; charset=utf-8", **HEADERS})
    await resp.prepare(request)
    request[STREAM] = resp
    sent_id = ""
    async with aclosing(frames):
        async for chunk in frames:
            if ids is not None and ids.last != sent_id and chunk.endswith(b"\n\n"):
                # After the data line, so a frame still starts with "data:" for clients that read it so; only
                # when it moved on, so closing frames such as "data:[DONE]" stay as the dialect wrote them.
                sent_id = ids.last
                chunk = chunk[:-1] + b"id: " + sent_id.encode() + b"\n\n"
            await resp.write(chunk)
    await resp.write_eof()
    return resp
