"""A local HTTP server standing in for an external web API (Tavily, SerpAPI, Wikipedia...).

    async with FakeWebApi() as api:
        api.route("POST", "/search", lambda req: {"results": [...]})   # a handler: Seen -> JSON | Response
        api.route("GET", "/w/api.php", {"query": {...}})               # or a fixed JSON answer
        api.route("GET", "/slow", {"ok": 1}, delay=30)                 # answers after `delay` seconds
        api.route("GET", "/down", {"error": "x"}, status=503)
        ... point the tool at api.url (TRELLIS_<SERVICE>_BASE_URL) ...
        [seen] = api.seen("/search")                                   # what the tool sent
        seen.json, seen.query, seen.headers

A route may have several answers, used one per request (the last one repeats):
`api.route("POST", "/search", Respond(503, "busy"), {"results": []})` tests a retry. Unrouted paths answer 404 and are recorded too. The server listens on 127.0.0.1 on a free
port; tools reach it only with 127.0.0.1 in the SSRF allow-list (`allow_local()`).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import MultiDict

from services.orchestrator.engine.settings import EngineSettings


@dataclass
class Seen:
    """One request the fake received."""

    method: str
    path: str
    query: MultiDict[str]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def form(self) -> dict[str, str]:
        from urllib.parse import parse_qsl
        return dict(parse_qsl(self.body.decode(), keep_blank_values=True))


Answer = Any  # a JSON-able value, a Respond, or a callable (Seen) -> either


@dataclass
class _Route:
    answers: list[Answer]
    status: int = 200
    delay: float = 0.0
    calls: int = field(default=0)


class FakeWebApi:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], _Route] = {}
        self.requests: list[Seen] = []
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._closing = asyncio.Event()

    def route(self, method: str, path: str, *answers: Answer, status: int = 200, delay: float = 0.0) -> None:
        self.routes[(method.upper(), path)] = _Route(list(answers), status, delay)

    def seen(self, path: str | None = None) -> list[Seen]:
        return [r for r in self.requests if path is None or r.path == path]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(request.method, request.path, MultiDict(request.query), dict(request.headers), await request.read())
        self.requests.append(seen)
        route = self.routes.get((request.method, request.path))
        if route is None:
            return web.json_response({"error": f"no route {request.method} {request.path}"}, status=404)
        answer = route.answers[min(route.calls, len(route.answers) - 1)]
        route.calls += 1
        if route.delay:  # cut short when the fake stops, so a test never waits for it
            try:
                await asyncio.wait_for(self._closing.wait(), route.delay)
            except TimeoutError:
                pass
        if callable(answer) and not isinstance(answer, Respond):
            answer = answer(seen)
        if isinstance(answer, web.StreamResponse):
            return answer
        if isinstance(answer, Respond):
            return web.Response(status=answer.status, text=answer.text, content_type=answer.content_type,
                                headers=answer.headers)
        return web.json_response(answer, status=route.status)

    async def __aenter__(self) -> FakeWebApi:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class Respond:
    """A non-JSON or non-200 answer in a route's list: `Respond(503, "busy")`, `Respond(200, "<html>", "text/html")`."""

    status: int
    text: str = ""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def allow_local(**kw: Any) -> EngineSettings:
    """Engine settings whose SSRF allow-list lets tools reach the fake on 127.0.0.1."""
    return EngineSettings(ssrf_allowlist=("127.0.0.1",), **kw)

