"""The run viewer: static files under gateway/ui/ served at /ui/ (plain ES modules, no build step), and the one
API only the viewer needs, its tenant's admission figures.

The page signs in with an API key kept in the browser and calls the same public APIs as any client
(agents, versions, sessions, run logs, the envelope stream), so the static routes here need no key themselves.

`GET /api/v1/tenant/admission` (the key's tenant): the refusals this gateway process answered for the tenant,
by limit (gateway/refusal.py). The orchestrator counts the tenant's admitted, waiting and refused runs and its
LLM tokens in its own Prometheus metrics but serves them over no RPC, so `admitted`, `waiting` and `tokens`
are null here until it does.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from pydantic import BaseModel

from gateway import refusal
from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.routes._views import ok

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
# A new gateway build must not run against a cached page of the last one.
_NO_CACHE = {"Cache-Control": "no-cache"}


class AdmissionOut(BaseModel):
    tenant: str
    refused: int  # answered by this gateway process since it started, every door together
    refused_by_limit: dict[str, int]
    admitted: int | None = None  # null: the orchestrator does not serve it (see the module docstring)
    waiting: int | None = None
    tokens: int | None = None


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_DIR / "index.html", headers=_NO_CACHE)


async def to_index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


@endpoint(Dialect.RAGFLOW, contract=Contract("The key's tenant's admission figures: its refusals by limit, as this "
                                             "gateway answered them", response=AdmissionOut, tags=("viewer",)))
async def admission(request: web.Request) -> web.StreamResponse:
    tenant = request[TENANT]
    by_limit = refusal.refused_by_tenant(tenant)
    return ok(AdmissionOut(tenant=tenant, refused=sum(by_limit.values()), refused_by_limit=by_limit).model_dump())


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui", to_index)
    app.router.add_get("/ui/", index)
    app.router.add_static("/ui/", UI_DIR, append_version=False)
    app.router.add_get("/api/v1/tenant/admission", admission)
