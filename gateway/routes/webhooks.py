"""RAGFlow's webhook trigger (its `agent_api.py`; gateway/webhooks/ checks the request):

- ANY /api/v1/agents/{agent_id}/webhook (POST, GET, PUT, PATCH, DELETE, HEAD): no API key; the agent is looked
  up among the tenants of the gateway's keys, and its draft's Begin in `Webhook` mode says which methods,
  what security and which schema. `execution_mode` "Immediately" (the default) answers the configured
  `response` (`status` 200-399, `body_template`: JSON, or text when it does not parse) once the run is
  recorded, and the run goes on without the caller, durably (continue_on_disconnect); any other mode waits
  and answers `{"message": <the run's text>, "success": true, "code": <message_end status, 200>}` with that
  HTTP status, or `{"code": 400, "message": ..., "success": false}` when the run fails. Either way the
  answer carries the run's ids in `X-Run-Id` and `X-Session-Id` (Trellis's addition), for the run API.
- ANY .../webhook/test: the same for the key's own agent (else code 103), and every event of its run is
  logged for .../webhook/logs (kept 600 s).
- GET .../webhook/logs?since_ts=&webhook_id=: RAGFlow's polling of those logs.

Refusals are RAGFlow's: `{"code": 400, "message": ...}` with HTTP 400, the message naming what failed; the
orchestrator's admission refusal (the tenant over a limit) is HTTP 429 with Retry-After, as at every door.
The payload reaches the run as RAGFlow passes it to its canvas: {"query", "headers", "body"} (as the schema
extracted them) become Begin's outputs, and the whole request (`input`) its input `request`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import grpc
from aiohttp import web
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import webhook_trigger_service_pb2 as wt_pb

from gateway.contract import Contract
from gateway.dialects.ragflow import Mode, RagflowRun
from gateway.endpoint import API_KEY_ID, KEYS, TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.responses import json_response
from gateway.routes._runs import agent_target
from gateway.webhooks import WebhookRefused, payload, schema, security

log = logging.getLogger(__name__)

METHODS = ("POST", "GET", "PUT", "PATCH", "DELETE", "HEAD")
OWNER_ONLY = "Only the owner of the agent is authorized for this operation."
_ID_SECRET = b"webhook_id_secret"  # RAGFlow's: the webhook ids of the logs are HMACs of their start times
_TASKS = web.AppKey("webhook_tasks", set)  # runs whose test log is still being written
_TAGS = ("webhooks",)


def _refused(message: str) -> web.Response:
    return json_response({"code": 400, "message": message}, status=400)


async def _agent(orch: Orchestrator, tenant: str, agent_id: str) -> agent_pb.Agent | None:
    try:
        resp = await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=tenant, agent_id=agent_id))
    except grpc.aio.AioRpcError as exc:
        if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            return None
        raise
    return resp.agent


@endpoint(Dialect.RAGFLOW, public=True, contract=Contract(
    "Trigger an agent whose Begin is in Webhook mode (RAGFlow's webhook; its own security, no API key)",
    error_statuses=(400,), tags=_TAGS))
async def webhook(request: web.Request) -> web.StreamResponse:
    orch, agent_id = request.app[ORCHESTRATOR], request.match_info["agent_id"]
    found = await asyncio.gather(*(_agent(orch, t, agent_id) for t in sorted(request.app[KEYS].tenants())))
    agents = [a for a in found if a is not None]
    if len(agents) != 1:  # none, or (ids are random) the same id under two tenants: nobody's to trigger
        return _refused("Canvas not found.")
    return await _trigger(request, agents[0].tenant_id, agents[0], test=False)


@endpoint(Dialect.RAGFLOW, contract=Contract(
    "Trigger the key's own webhook agent and log its run for .../webhook/logs", error_statuses=(400,), tags=_TAGS))
async def webhook_test(request: web.Request) -> web.StreamResponse:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    agent = await _agent(orch, tenant, request.match_info["agent_id"])
    if agent is None:
        return json_response({"code": 103, "message": OWNER_ONLY, "data": False})
    return await _trigger(request, tenant, agent, test=True)


def webhook_config(dsl: dict[str, Any]) -> dict[str, Any]:
    """The params of the (last) Begin in Webhook mode, as RAGFlow finds it; {} when there is none."""
    found: dict[str, Any] = {}
    for cpn in (dsl.get("components") or {}).values():
        obj = cpn.get("obj") if isinstance(cpn, dict) else None
        params = obj.get("params") if isinstance(obj, dict) else None
        if (isinstance(params, dict) and str(obj.get("component_name", "")).lower() == "begin"
                and params.get("mode") == "Webhook"):
            found = params
    return found


async def _trigger(request: web.Request, tenant: str, agent: agent_pb.Agent, *, test: bool) -> web.StreamResponse:
    start_ts = time.time()
    if agent.canvas_category == "dataflow_canvas":
        return _refused("Dataflow can not be triggered by webhook.")
    try:
        dsl = json.loads(agent.dsl_json or "null")
    except ValueError:
        dsl = None
    if not isinstance(dsl, dict):
        return _refused("Invalid DSL format.")
    cfg = webhook_config(dsl)
    if not cfg:
        return _refused("Webhook not configured for this agent.")
    allowed = cfg.get("methods") or []
    if allowed and request.method.upper() not in allowed:
        return _refused(f"HTTP method '{request.method.upper()}' not allowed for this webhook.")
    orch = request.app[ORCHESTRATOR]

    async def take(limit: int, window_s: int) -> bool:
        req = wt_pb.TakeWebhookRequestRequest(tenant_id=tenant, agent_id=agent.id, limit=limit, window_s=window_s)
        return (await orch.unary(orch.webhook_triggers.TakeWebhookRequest, req)).allowed

    try:
        await security.check(cfg.get("security", {}), request, take)
    except Exception as exc:  # RAGFlow answers every security failure with its text, a ValueError's too
        return _refused(str(exc))
    try:
        parsed = await payload.read(request, cfg.get("content_types"))
    except payload.ContentTypeMismatch as exc:  # RAGFlow's generic handler answers it
        return json_response({"code": 100, "message": repr(exc), "data": None})
    sections = cfg.get("schema") or {"query": {}, "headers": {}, "body": {}}
    try:
        clean = {name: schema.extract(parsed[name], sections.get(name, {}), name) for name in ("query", "headers", "body")}
    except WebhookRefused as exc:
        return _refused(str(exc))
    clean["input"] = parsed
    immediately = cfg.get("execution_mode", "Immediately") == "Immediately"
    req = canvas_pb.RunRequest(agent=agent_target(agent.id, draft=True), tenant_id=tenant, user_id=tenant,
                               webhook_payload_json=json.dumps(clean, ensure_ascii=False),
                               continue_on_disconnect=immediately,
                               api_key_id=request.get(API_KEY_ID, ""))  # /test's key; the public route has none
    trace = _TestLog(orch, tenant, agent.id, start_ts) if test else None
    if immediately:
        return await _answer_at_once(request, req, cfg.get("response") or {}, trace)
    return await _answer_when_done(request, req, trace)


async def _answer_at_once(request: web.Request, req: canvas_pb.RunRequest, response_cfg: dict[str, Any],
                          trace: _TestLog | None) -> web.StreamResponse:
    status = response_cfg.get("status", 200)
    try:
        status = int(status)
    except (TypeError, ValueError):
        return _refused(f"Invalid response status code: {status}")
    if not 200 <= status <= 399:
        return _refused(f"Invalid response status code: {status}, must be between 200 and 399")
    template = response_cfg.get("body_template", "")
    started: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
    # The run is followed by a task of its own: the answer waits for the run to be recorded (its first event),
    # then the run goes on without the caller; a test webhook's task stays to log the rest.
    task = asyncio.create_task(_follow(request.app[ORCHESTRATOR], req, started, trace))
    tasks = request.app[_TASKS]
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    run_id, session_id = await asyncio.shield(started)
    if template:
        try:
            body, ctype = json.dumps(json.loads(template), ensure_ascii=False), "application/json"
        except (ValueError, TypeError):
            body, ctype = template, "text/plain"
    else:
        body, ctype = "null", "application/json"
    return web.Response(text=body, status=status, content_type=ctype, headers=_ids(run_id, session_id))


async def _follow(orch: Orchestrator, req: canvas_pb.RunRequest, started: asyncio.Future[tuple[str, str]],
                  trace: _TestLog | None) -> None:
    run = RagflowRun(Mode.WORKFLOW)
    try:
        async with orch.run(req, merge=False) as events:
            async for ev in events:
                if not started.done():
                    started.set_result((ev.run_id, ev.session_id))
                    if trace is None:
                        return  # leaving cancels nothing: the run continues on disconnect
                await trace.event(run.convert(ev))
        if trace is not None:
            await trace.finished(True)
    except GatewayError as err:
        if not started.done():
            started.set_exception(err)
        elif trace is not None:
            await trace.failed(err.message, "RunError")
    except Exception as exc:
        log.exception("webhook run could not be followed")
        if not started.done():
            started.set_exception(exc)
        elif trace is not None:
            await trace.failed(str(exc), type(exc).__name__)
    finally:
        if not started.done():  # cancelled before the run's first event, or a stream with none
            started.set_exception(GatewayError("the webhook's run did not start", code=grpc.StatusCode.UNAVAILABLE))


async def _answer_when_done(request: web.Request, req: canvas_pb.RunRequest, trace: _TestLog | None) -> web.Response:
    run = RagflowRun(Mode.WORKFLOW)
    contents: list[str] = []
    status, run_id, session_id = 200, "", ""
    try:
        async with request.app[ORCHESTRATOR].run(req, merge=False) as events:
            async for ev in events:
                run_id, session_id = run_id or ev.run_id, session_id or ev.session_id
                out = run.convert(ev)
                if out is None:
                    continue
                if out["event"] == "message":
                    data = out["data"]
                    content = "<think>" if data.get("start_to_think") else "</think>" if data.get("end_to_think") \
                        else data.get("content")
                    if content:
                        contents.append(content)
                elif out["event"] == "message_end":
                    status = int(out["data"].get("status", status))
                if trace is not None:
                    await trace.event(out)
        if trace is not None:
            await trace.finished(True)
        result: dict[str, Any] = {"message": "".join(contents), "success": True, "code": status}
    except (GatewayError, ValueError) as exc:
        if isinstance(exc, GatewayError) and exc.refusal is not None and not run_id:
            raise  # refused before it started: 429 with Retry-After, as at every door (gateway/endpoint.py)
        message = exc.message if isinstance(exc, GatewayError) else str(exc)
        if trace is not None:
            await trace.failed(message, type(exc).__name__)
        result, status = {"code": 400, "message": message, "success": False}, 400
    return web.Response(text=json.dumps(result), status=status, content_type="application/json",
                        headers=_ids(run_id, session_id))


def _ids(run_id: str, session_id: str) -> dict[str, str]:
    return {k: v for k, v in (("X-Run-Id", run_id), ("X-Session-Id", session_id)) if v}


class _TestLog:
    """A test webhook's events, each stamped `ts`, sent to the orchestrator's log (WebhookTriggerService):
    deltas wait for the next other event, so a long answer is a few writes. A failing write is logged and
    dropped, as RAGFlow's trace is best effort."""

    def __init__(self, orch: Orchestrator, tenant: str, agent_id: str, start_ts: float) -> None:
        self._orch, self._tenant, self._agent_id, self._start_ts = orch, tenant, agent_id, start_ts
        self._pending: list[str] = []

    async def event(self, out: dict[str, Any] | None) -> None:
        if out is None:
            return
        self._pending.append(json.dumps({"ts": time.time(), **out}, ensure_ascii=False))
        if out["event"] != "message":
            await self._flush()

    async def finished(self, success: bool) -> None:
        await self.event({"event": "finished", "elapsed_time": time.time() - self._start_ts, "success": success})

    async def failed(self, message: str, error_type: str) -> None:
        await self.event({"event": "error", "message": message, "error_type": error_type})
        await self.finished(False)

    async def _flush(self) -> None:
        events, self._pending = self._pending, []
        req = wt_pb.AppendWebhookLogRequest(tenant_id=self._tenant, agent_id=self._agent_id,
                                            start_ts=str(self._start_ts), events_json=events)
        try:
            await self._orch.unary(self._orch.webhook_triggers.AppendWebhookLog, req)
        except grpc.aio.AioRpcError as exc:
            log.warning("webhook log not written for agent %s: %s", self._agent_id, exc.details())


def webhook_id(start_ts: str) -> str:
    sig = hmac.new(_ID_SECRET, start_ts.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(sig).decode().rstrip("=")


@endpoint(Dialect.RAGFLOW, contract=Contract("Poll the log of the agent's test webhooks (since_ts, webhook_id)", tags=_TAGS))
async def webhook_logs(request: web.Request) -> web.Response:
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    if await _agent(orch, tenant, agent_id) is None:
        return json_response({"code": 102, "message": "Canvas not found."})
    since_ts = _float(request.query.get("since_ts"))
    wanted = request.query.get("webhook_id")
    if since_ts is None:
        return _logs(None, [], time.time(), False)
    resp = await orch.unary(orch.webhook_triggers.GetWebhookLog,
                            wt_pb.GetWebhookLogRequest(tenant_id=tenant, agent_id=agent_id))
    webhooks = {w.start_ts: list(w.events_json) for w in resp.webhooks}
    if not webhooks:
        return _logs(None, [], since_ts, False)
    if wanted is None:
        later = [float(k) for k in webhooks if float(k) > since_ts]
        if not later:
            return _logs(None, [], since_ts, False)
        first = min(later)
        return _logs(webhook_id(str(first)), [], first, False)
    real = next((ts for ts in webhooks if webhook_id(ts) == wanted), None)
    if real is None:
        return _logs(wanted, [], since_ts, True)
    events = [e for e in (json.loads(raw) for raw in webhooks[real]) if e.get("ts", 0) > since_ts]
    next_ts = max([since_ts, *(e["ts"] for e in events)])
    return _logs(wanted, events, next_ts, any(e.get("event") == "finished" for e in events))


def _logs(wid: str | None, events: list[dict[str, Any]], next_ts: float, finished: bool) -> web.Response:
    return json_response({"code": 0, "message": "success",
                          "data": {"webhook_id": wid, "events": events, "next_since_ts": next_ts, "finished": finished}})


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def add_routes(app: web.Application) -> None:
    app[_TASKS] = set()

    async def stop_following(app: web.Application) -> None:
        for task in list(app[_TASKS]):
            task.cancel()  # a test log stops; the run itself goes on (continue_on_disconnect)

    app.on_shutdown.append(stop_following)
    for method in METHODS:
        app.router.add_route(method, "/api/v1/agents/{agent_id}/webhook", webhook)
        app.router.add_route(method, "/api/v1/agents/{agent_id}/webhook/test", webhook_test)
    app.router.add_get("/api/v1/agents/{agent_id}/webhook/logs", webhook_logs)
