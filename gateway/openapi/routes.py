"""GET /openapi.json (the document, built once from the router) and GET /docs (Swagger UI over it).

Swagger UI's files come from the swagger-ui-py package (a runtime dependency) and are served from
/docs/static/, so the page works without a network; /docs/ itself is gateway/openapi/docs.html.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.openapi import spec
from gateway.responses import json_response

SPEC = web.AppKey("openapi_spec", dict)
_PAGE = Path(__file__).with_name("docs.html")


def _swagger_static() -> Path:
    import swagger_ui

    return Path(swagger_ui.__file__).resolve().parent / "static"


async def openapi_json(request: web.Request) -> web.Response:
    document: dict[str, Any] = request.app[SPEC]
    if not document:  # built on first use, once every module has added its routes, then kept
        document.update(spec.build(request.app))
    return json_response(document)


async def docs(request: web.Request) -> web.FileResponse:
    return web.FileResponse(_PAGE, headers={"Cache-Control": "no-cache"})


def add_routes(app: web.Application) -> None:
    app[SPEC] = {}
    app.router.add_get("/openapi.json", openapi_json)
    app.router.add_get("/docs", docs)
    app.router.add_static("/docs/static/", _swagger_static(), append_version=True)
