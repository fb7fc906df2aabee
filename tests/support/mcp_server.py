"""A real MCP server for the tests, built with the `mcp` package's FastMCP and served by uvicorn on a free
loopback port in the test's own event loop: streamable HTTP at /mcp and SSE at /sse.

Tools: `add(a, b)`, `shout(text)`, `nap(seconds)` (sleeps, for timeouts) and `broken()` (raises).
With `token`, every request must carry `Authorization: Bearer <token>` (else 401), and `whoami()`
answers the header it saw. Run as a script, it serves the same tools on stdin/stdout (the stdio test).
"""
from __future__ import annotations

import asyncio
import json
import sys
from contextlib import asynccontextmanager
from typing import AsyncIterator

from mcp.server.fastmcp import Context, FastMCP
from starlette.responses import JSONResponse


def build(token: str | None = None) -> FastMCP:
    server = FastMCP("trellis-test", host="127.0.0.1")

    @server.tool(description="Adds two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Upper-cases a text.")
    def shout(text: str) -> str:
        return text.upper() + "!"

    @server.tool(description="Sleeps, then says so.")
    async def nap(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds:g}s"

    @server.tool(description="Always fails.")
    def broken() -> str:
        raise ValueError("the disk is on fire")

    @server.tool(description="The Authorization header of the request.")
    def whoami(ctx: Context) -> str:
        request = ctx.request_context.request
        return request.headers.get("authorization", "") if request is not None else ""

    return server


def counting(inner, counts: dict[str, int]):
    """ASGI middleware counting the JSON-RPC methods clients post (`initialize` = a session opened)."""
    async def app_(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await inner(scope, receive, send)
        body = bytearray()

        async def reading():
            message = await receive()
            if message["type"] != "http.request":
                return message
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                try:
                    method = json.loads(body).get("method")
                except (ValueError, AttributeError):
                    method = None
                if isinstance(method, str):
                    counts[method] = counts.get(method, 0) + 1
            return message

        await inner(scope, reading, send)
    return app_


def app(token: str | None = None, counts: dict[str, int] | None = None):
    server = build(token)
    application = server.streamable_http_app()
    application.routes.extend(server.sse_app().routes)  # /sse and /messages/ beside /mcp
    if counts is not None:
        starlette_app, application = application, counting(application, counts)
    else:
        starlette_app = application
    if token:
        inner = application

        async def guarded(scope, receive, send):
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                    await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                    return
            await inner(scope, receive, send)

        return guarded, starlette_app
    return application, starlette_app


@asynccontextmanager
async def serving(token: str | None = None, counts: dict[str, int] | None = None, port: int = 0) -> AsyncIterator[str]:
    """Base URL (http://127.0.0.1:<port>) of a running server; `counts` gets the JSON-RPC methods it was sent;
    `port` (default: a free one) serves again where a stopped server was. On exit, connections still open (a
    client's session) are closed after a second."""
    import uvicorn

    from tests.support.waiting import eventually  # (here: run as a script, this file serves stdio alone)

    asgi, starlette_app = app(token, counts)

    @asynccontextmanager
    async def lifespan(_):
        async with starlette_app.router.lifespan_context(starlette_app):
            yield

    config = uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    async with lifespan(None):
        task = asyncio.create_task(server.serve())
        await eventually(lambda: server.started or task.done(), what="the MCP server")
        if task.done():
            task.result()  # it failed to start: why
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await task


if __name__ == "__main__":
    build().run("stdio") if len(sys.argv) < 2 else None
