"""A SERVER span per HTTP request (HTTP semantic conventions), child of the client's W3C `traceparent`.

The span is current while the handler runs, so the gRPC calls it makes carry it on (services/common/channels.py)
and its log lines name it. A stream's span lasts until its last byte. Off (services/common/tracing.py), the
middleware only passes the request on.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from services.common import tracing

_UNTRACED = {"/healthz", "/metrics"}  # probes and scrapes are not traffic


@web.middleware
async def tracing_middleware(request: web.Request, handler):
    if not tracing.ACTIVE:
        return await handler(request)
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else ""
    if route in _UNTRACED:
        return await handler(request)
    attributes = {"http.request.method": request.method, "url.path": request.path, "url.scheme": request.scheme,
                  "http.route": route or None, "user_agent.original": request.headers.get("User-Agent"),
                  "server.address": request.host}
    span = tracing.start(f"{request.method} {route}" if route else request.method, kind=tracing.SpanKind.SERVER,
                         parent=tracing.extract(request.headers), attributes=attributes)
    token = tracing.attach(span)
    status: int | None = None
    gone = False
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:  # the client went away (a closed stream): not a server error
        gone = True
        raise
    finally:
        tracing.detach(token)
        if status is None and not gone:
            status = 500  # an exception aiohttp answers with a 500
        tracing.end(span, f"HTTP {status}" if status and status >= 500 else None,
                    **{"http.response.status_code": status, "trellis.http.client_gone": gone or None})
