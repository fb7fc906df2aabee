"""A run's status and a session's runs:

- GET /api/v1/agents/{agent_id}/runs/{run_id}: status (running, waiting_for_user, succeeded, failed,
  cancelled), timestamps, the paused run it resumed (`parent_run_id`), the failure reason, attempts (more than
  one after a replica died and another resumed it), the top-level components finished so far (`path`), while
  it waits for the user, the component that waits (`waiting_for`), and for a child run, the run whose AgentCall
  started it (`caller_run_id`; docs/agents-as-services.md, "Agents calling agents");
- GET /api/v1/agents/{agent_id}/sessions/{session_id}/runs: the session's runs, newest first.

- GET /api/v1/agents/{agent_id}/runs/{run_id}/join?timeout=&dialect=: waits for the run (a background run's
  result, any run's) and answers it as the completion routes answer a run that did not stream, in `dialect`
  (ragflow, the default, or openai); after `timeout` seconds (30 by default, at most TRELLIS_RUN_TIMEOUT_S)
  it answers 202 with the ids and "running" instead;
- GET /api/v1/agents/{agent_id}/runs/{run_id}/events?dialect=: the run's stream in `dialect` (ragflow,
  openai or envelope) from its start, or after the event a `Last-Event-ID: <run id>:<seq>` header names.

- GET /api/v1/agents/{agent_id}/runs/{run_id}/interrupts: what a paused run waits for (form, tips, expiry);
  POST .../interrupts/{interrupt_id}/resolve {"inputs"} answers it once: 409 once answered, 410 once expired.

A run's events are also rejoined on the completion routes themselves, with the `Last-Event-ID` header.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import grpc

from aiohttp import web
from pydantic import BaseModel, Field
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway import sse
from gateway.contract import Contract, query
from gateway.dialects import DialectRun
from gateway.dialects.envelope import EnvelopeRun
from gateway.dialects.openai import OpenAIRun
from gateway.dialects.ragflow import Mode, RagflowRun
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR, parse_event_id
from gateway.responses import CompletionData, RunOut
from gateway.protocol import parse, read_json
from gateway.routes._runs import respond, started
from gateway.routes._views import ok

_TAGS = ("runs",)


def run_view(run: canvas_pb.RunInfo) -> dict:
    return {"id": run.run_id, "session_id": run.session_id, "agent_id": run.agent_id, "status": run.status,
            "error": run.error or None, "started_at": run.started_at, "finished_at": run.finished_at or None,
            "parent_run_id": run.parent_run_id or None, "attempts": run.attempts, "path": list(run.path),
            "waiting_for": run.waiting_for or None, "caller_run_id": run.caller_run_id or None}


@endpoint(Dialect.RAGFLOW, contract=Contract("A run's status", response=RunOut, tags=_TAGS))
async def get_run(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = canvas_pb.GetRunRequest(tenant_id=tenant, run_id=request.match_info["run_id"],
                                  agent_id=request.match_info["agent_id"])
    return ok(run_view((await orch.unary(orch.canvas.GetRun, req)).run))


@endpoint(Dialect.RAGFLOW, contract=Contract("A session's runs, newest first", response=list[RunOut], tags=_TAGS))
async def list_session_runs(request: web.Request) -> web.Response:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = canvas_pb.ListRunsRequest(tenant_id=tenant, session_id=request.match_info["session_id"],
                                    agent_id=request.match_info["agent_id"])
    return ok([run_view(r) for r in (await orch.unary(orch.canvas.ListRuns, req)).runs])


class JoinQuery(BaseModel):
    timeout: float = Field(30.0, ge=0)  # seconds to wait; at most TRELLIS_RUN_TIMEOUT_S
    dialect: Literal["ragflow", "openai"] = "ragflow"


class EventsQuery(BaseModel):
    dialect: Literal["ragflow", "openai", "envelope"] = "ragflow"


def _dialect_run(dialect: str, run: canvas_pb.RunInfo) -> DialectRun:
    if dialect == "openai":
        return OpenAIRun(model=run.agent_id, completion_id=run.session_id)
    if dialect == "envelope":
        return EnvelopeRun(run.session_id)
    return RagflowRun(Mode.WORKFLOW, session_id=run.session_id)


async def _run_info(request: web.Request) -> canvas_pb.RunInfo:
    """The run of the path, which must be the agent's (NOT_FOUND otherwise)."""
    orch = request.app[ORCHESTRATOR]
    req = canvas_pb.GetRunRequest(tenant_id=request[TENANT], run_id=request.match_info["run_id"],
                                  agent_id=request.match_info["agent_id"])
    return (await orch.unary(orch.canvas.GetRun, req)).run


@endpoint(Dialect.RAGFLOW, contract=Contract("Wait for a run's result (bounded by `timeout`; 202 while it runs)",
                                             query=JoinQuery, response=CompletionData, tags=_TAGS))
async def join_run(request: web.Request) -> web.StreamResponse:
    q: JoinQuery = query(request)
    orch, info = request.app[ORCHESTRATOR], await _run_info(request)
    run = _dialect_run(q.dialect, info)
    try:
        async with asyncio.timeout(min(q.timeout, orch.run_timeout_s)):
            async with orch.run(canvas_pb.RunRequest(tenant_id=request[TENANT]), last_event_id=f"{info.run_id}:0",
                                merge=False) as events:
                return await run.answer(events)
    except TimeoutError:
        return started(info.run_id, info.session_id)


@endpoint(Dialect.RAGFLOW, contract=Contract("A run's events in a dialect, from its start or after Last-Event-ID",
                                             query=EventsQuery, stream=True, tags=_TAGS))
async def run_events(request: web.Request) -> web.StreamResponse:
    q: EventsQuery = query(request)
    info = await _run_info(request)
    last = request.headers.get("Last-Event-ID", "") or f"{info.run_id}:0"
    if parse_event_id(last)[0] != info.run_id:
        raise GatewayError(f"Last-Event-ID {last!r} names another run than {info.run_id}", param="Last-Event-ID")
    run = _dialect_run(q.dialect, info)
    async with request.app[ORCHESTRATOR].run(canvas_pb.RunRequest(tenant_id=request[TENANT]),
                                             last_event_id=last) as events:
        return await sse.send(request, run.stream(events), events, media_type=run.dialect.media_type)


class InterruptOut(BaseModel):
    id: str  # "<run id>:<component>": POST .../interrupts/{id}/resolve answers it
    run_id: str
    component: str  # the UserFillUp that waits
    form: dict = Field(default_factory=dict)  # {field: {name, type, optional, options, value}}
    tips: str = ""
    expires_at: float | None = None  # epoch seconds; null: it never expires
    status: Literal["waiting", "answered", "expired", "cancelled"]
    on_timeout: str = "fail"  # what becomes of the run when it expires: fail, defaults, cancel


class ResolveBody(BaseModel):
    model_config = {"extra": "forbid"}
    inputs: dict = Field(default_factory=dict)  # the form's answers: {field: value} or {field: {"value": ...}}


def _interrupt_view(i: canvas_pb.Interrupt) -> dict:
    return {"id": i.id, "run_id": i.run_id, "component": i.component, "form": json.loads(i.form_json or "{}"),
            "tips": i.tips, "expires_at": i.expires_at or None, "status": i.status, "on_timeout": i.on_timeout}


@endpoint(Dialect.RAGFLOW, contract=Contract("What a paused run waits for (its UserFillUp's form, tips, expiry)",
                                             response=list[InterruptOut], tags=_TAGS))
async def list_interrupts(request: web.Request) -> web.Response:
    orch = request.app[ORCHESTRATOR]
    req = canvas_pb.ListInterruptsRequest(tenant_id=request[TENANT], run_id=request.match_info["run_id"],
                                          agent_id=request.match_info["agent_id"])
    return ok([_interrupt_view(i) for i in (await orch.unary(orch.canvas.ListInterrupts, req)).interrupts])


@endpoint(Dialect.RAGFLOW, contract=Contract(
    "Answer an interrupt with its inputs, once (409 once answered, 410 once expired); the resumed run's result",
    body=ResolveBody, response=CompletionData, error_statuses=(409, 410), tags=_TAGS))
async def resolve_interrupt(request: web.Request) -> web.StreamResponse:
    body = parse(ResolveBody, await read_json(request))
    info = await _run_info(request)
    interrupt_id = request.match_info["interrupt_id"]
    if interrupt_id.partition(":")[0] != info.run_id:
        raise GatewayError(f"interrupt {interrupt_id!r} is not run {info.run_id}'s", code=grpc.StatusCode.NOT_FOUND)
    req = canvas_pb.RunRequest(agent=canvas_pb.AgentTarget(agent_id=info.agent_id), tenant_id=request[TENANT],
                               session_id=info.session_id, inputs_json=json.dumps(body.inputs),
                               interrupt_id=interrupt_id)
    try:
        return await respond(request, req, RagflowRun(Mode.WORKFLOW, session_id=info.session_id), stream=False)
    except GatewayError as err:
        if err.code == grpc.StatusCode.OUT_OF_RANGE:  # expired: 410 Gone, whatever the dialect
            raise GatewayError(err.message, code=err.code, http_status=410) from None
        raise


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/agents/{agent_id}/runs/{run_id}/join", join_run)
    app.router.add_get("/api/v1/agents/{agent_id}/runs/{run_id}/events", run_events)
    app.router.add_get("/api/v1/agents/{agent_id}/runs/{run_id}", get_run)
    app.router.add_get("/api/v1/agents/{agent_id}/runs/{run_id}/interrupts", list_interrupts)
    app.router.add_post("/api/v1/agents/{agent_id}/runs/{run_id}/interrupts/{interrupt_id}/resolve", resolve_interrupt)
    app.router.add_get("/api/v1/agents/{agent_id}/sessions/{session_id}/runs", list_session_runs)
