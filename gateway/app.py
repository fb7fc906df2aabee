"""The aiohttp application: routes, middlewares, and the upstream channels' lifetime."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

from gateway import routes
from gateway.config import CONFIG, GatewayConfig
from gateway.responses import json_response
from gateway.tracing import tracing_middleware
from gateway.upstreams import UPSTREAMS, Upstreams
from services.common import context as ctxvars
from services.common.metrics import count_tasks

REQUEST_ID = web.RequestKey("request_id", str)

HTTP_TOTAL = Counter("trellis_http_requests_total", "HTTP requests, by route and status", ["route", "method", "status"])
HTTP_LATENCY = Histogram("trellis_http_request_seconds", "HTTP request latency until the handler returns", ["route", "method"])
_UNMETERED = {"/healthz", "/metrics"}


@web.middleware
async def _metrics_middleware(request: web.Request, handler):
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
    if route in _UNMETERED:
        return await handler(request)
    start = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        HTTP_TOTAL.labels(route, request.method, str(status)).inc()
        HTTP_LATENCY.labels(route, request.method).observe(time.perf_counter() - start)


@web.middleware
async def _request_id_middleware(request: web.Request, handler):
    """Take the caller's X-Request-Id (or make one): it rides every gRPC call this request makes and comes
    back on the response, so one id follows a request through every service's logs."""
    rid = request.headers.get("X-Request-Id", "")[:128] or ctxvars.new_request_id()
    ctxvars.request_id.set(rid)
    request[REQUEST_ID] = rid
    return await handler(request)


async def _echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    if REQUEST_ID in request:  # set for every routed request; streams get it before their first byte
        response.headers["X-Request-Id"] = request[REQUEST_ID]


async def healthz(request: web.Request) -> web.Response:
    """200 when every upstream says SERVING, else 503 naming the ones that do not."""
    cfg = request.app[CONFIG]
    statuses = await request.app[UPSTREAMS].health(cfg.health_timeout_s)
    failing = sorted(name for name, status in statuses.items() if status != "SERVING")
    body = {"status": "ok" if not failing else "unavailable", "upstreams": statuses}
    if failing:
        body["failing"] = failing
    return json_response(body, status=200 if not failing else 503)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _count_tasks(app: web.Application) -> None:
    count_tasks(asyncio.get_running_loop())  # trellis_asyncio_tasks on /metrics


def create_app(cfg: GatewayConfig) -> web.Application:
    # client_max_size: a larger body makes request.read() raise, which the routes answer with a 413.
    app = web.Application(middlewares=[tracing_middleware, _request_id_middleware, _metrics_middleware],
                          client_max_size=cfg.max_body_bytes)
    app[CONFIG] = cfg

    async def upstreams_ctx(app: web.Application):
        app[UPSTREAMS] = Upstreams(cfg.upstreams)
        yield
        await app[UPSTREAMS].close()

    app.on_response_prepare.append(_echo_request_id)
    app.on_startup.append(_count_tasks)
    app.cleanup_ctx.append(upstreams_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    routes.setup(app, cfg, UPSTREAMS)  # the RAGFlow, OpenAI and standard-envelope APIs
    return app
