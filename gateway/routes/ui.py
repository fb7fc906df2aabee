"""The run viewer: static files under gateway/ui/ served at /ui/ (plain ES modules, no build step).

The page signs in with an API key kept in the browser and calls the same public APIs as any client
(agents, versions, sessions, run logs, the envelope stream), so the routes here need no key themselves.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
# A new gateway build must not run against a cached page of the last one.
_NO_CACHE = {"Cache-Control": "no-cache"}


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_DIR / "index.html", headers=_NO_CACHE)


async def to_index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui", to_index)
    app.router.add_get("/ui/", index)
    app.router.add_static("/ui/", UI_DIR, append_version=False)
