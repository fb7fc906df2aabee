"""The run viewer: static files under gateway/ui/ served at /ui/ (plain ES modules, no build step), and the one
API only the viewer needs, its tenant's admission figures.

The page signs in with an API key kept in the browser and calls the same public APIs as any client
(agents, versions, sessions, run logs, the envelope stream), so the static routes here need no key themselves.

`GET /api/v1/tenant/admission` (the key's tenant): its admission figures over every orchestrator replica
(CanvasService/GetTenantAdmission: admitted, refused by limit, running and waiting now, LLM tokens in the last
minute and in all) and its limits in force. When that call fails the route still answers, with what this
gateway process knows alone: the refusals it answered the tenant, by limit (gateway/refusal.py), and null for
the rest (`source` says which).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import grpc
from aiohttp import web
from pydantic import BaseModel

from gateway import refusal
from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.orchestrator import ORCHESTRATOR
from gateway.routes._views import ok

log = logging.getLogger(__name__)

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
# A new gateway build must not run against a cached page of the last one.
_NO_CACHE = {"Cache-Control": "no-cache"}


class LimitsOut(BaseModel):
    """The tenant's limits in force (docs/limits.md); null: unlimited."""

    concurrent_runs: int | None = None
    runs_per_second: float | None = None
    burst: int | None = None
    tokens_per_minute: int | None = None
    held_streams: int | None = None
    weight: float = 1.0
    priority: int = 0


class AdmissionOut(BaseModel):
    tenant: str
    # "orchestrator": every replica's figures; "gateway": the orchestrator did not answer, so only this gateway
    # process's refusals since it started, and null for what it cannot know
    source: Literal["orchestrator", "gateway"]
    refused: int  # every limit together
    refused_by_limit: dict[str, int]
    admitted: int | None = None
    waiting: int | None = None  # now, for a replica's capacity
    running: int | None = None  # now
    tokens: int | None = None  # LLM tokens, prompt and completion, in all
    tokens_last_minute: int | None = None
    limits: LimitsOut | None = None
    replicas: int | None = None  # the orchestrator replicas whose figures are summed


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_DIR / "index.html", headers=_NO_CACHE)


async def to_index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


@endpoint(Dialect.RAGFLOW, contract=Contract("The key's tenant's admission figures over every orchestrator replica "
                                             "and its limits (or, when the orchestrator does not answer, the "
                                             "refusals this gateway answered)", response=AdmissionOut,
                                             tags=("viewer",)))
async def admission(request: web.Request) -> web.StreamResponse:
    tenant = request[TENANT]
    try:
        found = await request.app[ORCHESTRATOR].tenant_admission(tenant)
    except grpc.aio.AioRpcError as exc:
        log.warning("admission figures of tenant %r: the orchestrator did not answer (%s: %s); showing this "
                    "gateway's refusals", tenant, exc.code().name, exc.details())
        by_limit = refusal.refused_by_tenant(tenant)
        return ok(AdmissionOut(tenant=tenant, source="gateway", refused=sum(by_limit.values()),
                               refused_by_limit=by_limit).model_dump())
    limits = found.limits
    return ok(AdmissionOut(
        tenant=tenant, source="orchestrator", refused=found.refused, refused_by_limit=dict(found.refused_by_limit),
        admitted=found.admitted, waiting=found.waiting, running=found.running, tokens=found.llm_tokens,
        tokens_last_minute=found.llm_tokens_last_minute, replicas=found.replicas,
        limits=LimitsOut(**{name: getattr(limits, name) if limits.HasField(name) else None
                            for name in ("concurrent_runs", "runs_per_second", "burst", "tokens_per_minute",
                                         "held_streams")}, weight=limits.weight or 1.0, priority=limits.priority),
    ).model_dump())


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui", to_index)
    app.router.add_get("/ui/", index)
    app.router.add_static("/ui/", UI_DIR, append_version=False)
    app.router.add_get("/api/v1/tenant/admission", admission)
