"""Schedules and completion webhooks of an agent (the orchestrator's ScheduleService and WebhookService), in
RAGFlow's envelope `{code, data, message}`:

    POST   /api/v1/agents/{agent_id}/schedules                      create: cron (5 fields) required; timezone,
                                                                   end_at, enabled, query, inputs, version_id,
                                                                   draft, overlap, catch_up, webhook, user_id
    GET    /api/v1/agents/{agent_id}/schedules                      list, oldest first
    GET    /api/v1/agents/{agent_id}/schedules/{schedule_id}
    PATCH  /api/v1/agents/{agent_id}/schedules/{schedule_id}        only the fields sent change
    DELETE /api/v1/agents/{agent_id}/schedules/{schedule_id}
    POST   /api/v1/agents/{agent_id}/schedules/{schedule_id}/trigger    a run now (its overlap policy applies)
    PUT    /api/v1/agents/{agent_id}/completion_webhook              {url, events?, secret?}: every run of the agent
    GET    /api/v1/agents/{agent_id}/completion_webhook              (its secret is never read back)
    DELETE /api/v1/agents/{agent_id}/completion_webhook
    GET    /api/v1/agents/{agent_id}/runs/{run_id}/deliveries        a run's webhook deliveries and their attempts

A webhook made without a secret gets one, returned once as `webhook_secret`. How schedules fire and how
deliveries are signed and retried: docs/triggers.md.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict
from trellis.canvas.v1 import schedule_service_pb2 as sched_pb
from trellis.canvas.v1 import schedule_service_pb2_grpc as sched_grpc
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb
from trellis.canvas.v1 import webhook_service_pb2_grpc as hook_grpc

from gateway.contract import Contract, body
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.orchestrator import ORCHESTRATOR
from gateway.routes._views import ok
from gateway.upstreams import Upstreams

_TAGS = ("schedules",)


class _Stubs:
    def __init__(self, channel: Any) -> None:
        self.schedules = sched_grpc.ScheduleServiceStub(channel)
        self.webhooks = hook_grpc.WebhookServiceStub(channel)


STUBS = web.AppKey("trigger_stubs", _Stubs)


# ---- bodies and answers ------------------------------------------------------------------------------

class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    events: list[str] | None = None  # run.succeeded, run.failed, run.waiting_for_user, run.cancelled (default: all)
    secret: str | None = None  # whsec_ + base64; absent: one is made and returned once


class ScheduleFieldsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cron: str | None = None  # minute hour day-of-month month day-of-week
    timezone: str | None = None  # IANA name, default UTC
    end_at: float | None = None  # epoch seconds; no tick fires after it (0: never)
    enabled: bool | None = None
    query: str | None = None
    inputs: dict[str, Any] | None = None  # Begin's inputs
    version_id: str | None = None  # a published version; default the latest published when fired
    draft: bool | None = None  # run the draft instead
    overlap: str | None = None  # the previous run still going: skip (default), enqueue, cancel
    catch_up: str | None = None  # ticks missed while no replica ran: run_once (default), skip
    webhook: WebhookIn | None = None  # {"url": ""} removes it
    user_id: str | None = None


class CreateScheduleBody(ScheduleFieldsBody):
    cron: str  # type: ignore[assignment]


class WebhookOut(BaseModel):
    url: str
    events: list[str]


class ScheduleOut(BaseModel):
    id: str
    agent_id: str
    cron: str
    timezone: str
    end_at: float | None = None
    enabled: bool
    query: str
    inputs: dict[str, Any]
    version_id: str | None = None
    draft: bool
    overlap: str
    catch_up: str
    webhook: WebhookOut | None = None
    user_id: str | None = None
    create_time: float
    update_time: float
    next_fire_at: float | None = None  # null when disabled or past its end
    last_run_id: str | None = None
    last_fired_at: float | None = None
    pending: bool  # overlap=enqueue: a tick waits for the previous run
    webhook_secret: str | None = None  # only from the call that made the webhook's secret


class TriggerOut(BaseModel):
    run_id: str | None = None
    skipped: bool
    queued: bool


class AgentWebhookOut(WebhookOut):
    secret: str | None = None  # only when this call made or set it


class AttemptOut(BaseModel):
    at: float
    status_code: int | None = None
    error: str | None = None


class DeliveryOut(BaseModel):
    id: str  # the webhook-id header, the same on every attempt
    event: str
    url: str
    source: str  # request, agent, schedule
    state: str  # pending, delivered, failed
    next_attempt_at: float | None = None
    attempts: list[AttemptOut]


# ---- views -------------------------------------------------------------------------------------------

def _fields(req: ScheduleFieldsBody) -> sched_pb.ScheduleFields:
    fields = sched_pb.ScheduleFields()
    for name in ("cron", "timezone", "end_at", "enabled", "query", "version_id", "draft", "overlap", "catch_up",
                 "user_id"):
        value = getattr(req, name)
        if value is not None:
            setattr(fields, name, value)
    if req.inputs is not None:
        fields.inputs_json = json.dumps(req.inputs, ensure_ascii=False)
    if req.webhook is not None:
        fields.webhook.CopyFrom(_webhook(req.webhook))
    return fields


def _webhook(w: WebhookIn) -> hook_pb.CompletionWebhook:
    return hook_pb.CompletionWebhook(url=w.url, events=w.events or [], secret=w.secret or "")


def _webhook_view(w: hook_pb.CompletionWebhook) -> dict[str, Any]:
    return {"url": w.url, "events": list(w.events)}


def schedule_view(s: sched_pb.Schedule, secret: str = "") -> dict[str, Any]:
    view = {"id": s.id, "agent_id": s.agent_id, "cron": s.cron, "timezone": s.timezone, "end_at": s.end_at or None,
            "enabled": s.enabled, "query": s.query, "inputs": json.loads(s.inputs_json or "{}"),
            "version_id": s.version_id or None, "draft": s.draft, "overlap": s.overlap, "catch_up": s.catch_up,
            "webhook": _webhook_view(s.webhook) if s.HasField("webhook") else None, "user_id": s.user_id or None,
            "create_time": s.created_at, "update_time": s.updated_at, "next_fire_at": s.next_fire_at or None,
            "last_run_id": s.last_run_id or None, "last_fired_at": s.last_fired_at or None, "pending": s.pending}
    if secret:
        view["webhook_secret"] = secret
    return view


def delivery_view(d: hook_pb.Delivery) -> dict[str, Any]:
    return {"id": d.id, "event": d.event, "url": d.url, "source": d.source, "state": d.state,
            "next_attempt_at": d.next_attempt_at or None,
            "attempts": [{"at": a.at, "status_code": a.status_code or None, "error": a.error or None}
                         for a in d.attempts]}


def _ids(request: web.Request) -> dict[str, str]:
    return {"tenant_id": request[TENANT], "agent_id": request.match_info["agent_id"]}


# ---- schedules ---------------------------------------------------------------------------------------

@endpoint(Dialect.RAGFLOW, contract=Contract("Create a schedule of an agent", body=CreateScheduleBody,
                                             response=ScheduleOut, tags=_TAGS))
async def create_schedule(request: web.Request) -> web.Response:
    req = await body(request)
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.schedules.CreateSchedule,
                            sched_pb.CreateScheduleRequest(**_ids(request), fields=_fields(req)))
    return ok(schedule_view(resp.schedule, resp.webhook_secret))


@endpoint(Dialect.RAGFLOW, contract=Contract("An agent's schedules", response=list[ScheduleOut], tags=_TAGS))
async def list_schedules(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.schedules.ListSchedules, sched_pb.ListSchedulesRequest(**_ids(request)))
    return ok([schedule_view(s) for s in resp.schedules])


@endpoint(Dialect.RAGFLOW, contract=Contract("A schedule", response=ScheduleOut, tags=_TAGS))
async def get_schedule(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.schedules.GetSchedule, sched_pb.GetScheduleRequest(
        **_ids(request), schedule_id=request.match_info["schedule_id"]))
    return ok(schedule_view(resp.schedule))


@endpoint(Dialect.RAGFLOW, contract=Contract("Change a schedule (only the fields sent)", body=ScheduleFieldsBody,
                                             response=ScheduleOut, tags=_TAGS))
async def update_schedule(request: web.Request) -> web.Response:
    req = await body(request)
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.schedules.UpdateSchedule, sched_pb.UpdateScheduleRequest(
        **_ids(request), schedule_id=request.match_info["schedule_id"], fields=_fields(req)))
    return ok(schedule_view(resp.schedule, resp.webhook_secret))


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete a schedule", response=bool, tags=_TAGS))
async def delete_schedule(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.schedules.DeleteSchedule, sched_pb.DeleteScheduleRequest(
        **_ids(request), schedule_id=request.match_info["schedule_id"]))
    return ok(resp.deleted)


@endpoint(Dialect.RAGFLOW, contract=Contract("Run a schedule now", response=TriggerOut, tags=_TAGS))
async def trigger_schedule(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.schedules.TriggerSchedule, sched_pb.TriggerScheduleRequest(
        **_ids(request), schedule_id=request.match_info["schedule_id"]))
    return ok({"run_id": resp.run_id or None, "skipped": resp.skipped, "queued": resp.queued})


# ---- completion webhooks -----------------------------------------------------------------------------

@endpoint(Dialect.RAGFLOW, contract=Contract("Set the agent's completion webhook", body=WebhookIn,
                                             response=AgentWebhookOut, tags=_TAGS))
async def set_agent_webhook(request: web.Request) -> web.Response:
    req = await body(request)
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.webhooks.SetAgentWebhook,
                            hook_pb.SetAgentWebhookRequest(**_ids(request), webhook=_webhook(req)))
    return ok({**_webhook_view(resp.webhook), "secret": resp.webhook.secret})


@endpoint(Dialect.RAGFLOW, contract=Contract("The agent's completion webhook", response=AgentWebhookOut, tags=_TAGS))
async def get_agent_webhook(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.webhooks.GetAgentWebhook, hook_pb.GetAgentWebhookRequest(**_ids(request)))
    return ok(_webhook_view(resp.webhook))


@endpoint(Dialect.RAGFLOW, contract=Contract("Remove the agent's completion webhook", response=bool, tags=_TAGS))
async def delete_agent_webhook(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.webhooks.DeleteAgentWebhook, hook_pb.DeleteAgentWebhookRequest(**_ids(request)))
    return ok(resp.deleted)


@endpoint(Dialect.RAGFLOW, contract=Contract("A run's completion webhook deliveries and their attempts",
                                             response=list[DeliveryOut], tags=("runs",)))
async def run_deliveries(request: web.Request) -> web.Response:
    orch, stubs = request.app[ORCHESTRATOR], request.app[STUBS]
    resp = await orch.unary(stubs.webhooks.ListRunDeliveries, hook_pb.ListRunDeliveriesRequest(
        **_ids(request), run_id=request.match_info["run_id"]))
    return ok([delivery_view(d) for d in resp.deliveries])


def add_routes(app: web.Application, upstreams: web.AppKey[Upstreams]) -> None:
    async def context(app: web.Application):
        app[STUBS] = _Stubs(app[upstreams].channels["orchestrator"])
        yield

    app.cleanup_ctx.append(context)
    base = "/api/v1/agents/{agent_id}"
    app.router.add_post(f"{base}/schedules", create_schedule)
    app.router.add_get(f"{base}/schedules", list_schedules)
    app.router.add_get(f"{base}/schedules/{{schedule_id}}", get_schedule)
    app.router.add_patch(f"{base}/schedules/{{schedule_id}}", update_schedule)
    app.router.add_delete(f"{base}/schedules/{{schedule_id}}", delete_schedule)
    app.router.add_post(f"{base}/schedules/{{schedule_id}}/trigger", trigger_schedule)
    app.router.add_put(f"{base}/completion_webhook", set_agent_webhook)
    app.router.add_get(f"{base}/completion_webhook", get_agent_webhook)
    app.router.add_delete(f"{base}/completion_webhook", delete_agent_webhook)
    app.router.add_get(f"{base}/runs/{{run_id}}/deliveries", run_deliveries)
