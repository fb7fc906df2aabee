"""An ASGI application served from an aiohttp handler: the MCP and A2A doors (gateway/mcp_server/, gateway/a2a/)
are the official SDKs' servers, and both are ASGI (Starlette) applications.

    async def handler(request: web.Request) -> web.StreamResponse:
        return await serve_asgi(asgi_app, request, state={"tenant": tenant})

The request becomes one ASGI `http` scope (ASGI 3.0, HTTP spec 2.3) and the app's `http.response.*` messages
become one `web.StreamResponse`, each body message written (and drained) as it comes, so a stream the app
sends reaches the client frame by frame. `state` becomes the scope's `state`, which a Starlette `Request`
exposes as `request.state`: how the tenant that the gateway authenticated reaches the SDK's handlers.

The body is read with `request.read()`, so the app's `client_max_size` bounds it as on every other route.
After the body, `receive()` answers `http.disconnect` once the response is complete or the handler ends: a
client that goes away cancels the handler (`handler_cancellation=True`, gateway/__main__.py) and with it the
app's task, as on the other streaming routes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, MutableMapping

from aiohttp import web

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade"}


def _log_failure(run: asyncio.Future) -> None:
    if not run.cancelled() and (exc := run.exception()) is not None:
        log.error("ASGI app failed", exc_info=exc)


def http_scope(request: web.Request, body_state: dict[str, Any], extra: dict[str, Any] | None = None) -> Scope:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode(),
        "query_string": request.query_string.encode(),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": body_state,
    }
    scope.update(extra or {})
    return scope


async def serve_asgi(app: ASGIApp, request: web.Request, *, state: dict[str, Any] | None = None,
                     scope_extra: dict[str, Any] | None = None) -> web.StreamResponse:
    """Run `app` for `request` and answer with what it sends. `scope_extra` adds scope keys (e.g. `user`)."""
    body = await request.read()
    finished = asyncio.Event()
    body_sent = False
    response: web.StreamResponse | None = None
    pending: tuple[int, list[tuple[bytes, bytes]]] | None = None

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def start(status: int, headers: list[tuple[bytes, bytes]]) -> web.StreamResponse:
        resp = web.StreamResponse(status=status)
        for name, value in headers:
            key = name.decode("latin-1")
            if key.lower() not in _HOP_BY_HOP:
                resp.headers.add(key, value.decode("latin-1"))
        await resp.prepare(request)
        return resp

    async def send(message: Message) -> None:
        nonlocal response, pending
        kind = message["type"]
        if kind == "http.response.start":
            pending = (int(message["status"]), list(message.get("headers", [])))
        elif kind == "http.response.body":
            if finished.is_set():  # the response is complete: nothing more goes out
                return
            if response is None:
                if pending is None:
                    raise RuntimeError("ASGI app sent a body before http.response.start")
                response = await start(*pending)
            if chunk := message.get("body", b""):
                await response.write(chunk)
            if not message.get("more_body", False):
                await response.write_eof()
                finished.set()

    run = asyncio.ensure_future(app(http_scope(request, state if state is not None else {}, scope_extra), receive, send))
    run.add_done_callback(_log_failure)
    try:
        # Shielded: a client that leaves once its response is complete must not cut the app's own bookkeeping
        # short (the MCP session manager would drop the session it just opened). One that leaves before cancels it.
        await asyncio.shield(run)
    except asyncio.CancelledError:
        if not finished.is_set():
            run.cancel()
        raise
    finally:
        finished.set()
    if response is None:
        if pending is None:
            raise RuntimeError(f"ASGI app sent no response for {request.method} {request.path}")
        response = await start(*pending)  # a start with no body message: an empty body
        await response.write_eof()
    return response
