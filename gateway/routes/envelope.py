"""The standard envelope stream (gateway.dialects.envelope) for a stored agent:

    POST /api/v1/agents/{agent_id}/stream
    {"query" | "message": "...", "thread_id"?: "<session id>", "inputs"?: {...}, "user_id"?: "...",
     "version_id"?: "...", "draft"?: false, "on_disconnect"?: "cancel" | "continue", "background"?: false,
     "completion_webhook"?: {"url", "events"?, "secret"}}

Without `thread_id` a new session is created (its id is the first event, `thread_id`) and the latest
published version runs (or the draft when none is published, or `draft: true`, or `version_id`); with it
the session continues on its own version. Errors before the stream are one envelope of type `error`
with the HTTP status of gateway.errors; afterwards `error` then `done` in the stream. With `background`
the answer is 202 and one envelope of type `status` (`run_started`, `background: true`) carrying the run's
and the session's ids; `.../runs/{run_id}/events?dialect=envelope` streams the run.
"""

from __future__ import annotations

from aiohttp import web
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.dialects.envelope import EnvelopeRun
from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.orchestrator import ORCHESTRATOR
from gateway.protocol import EnvelopeRunBody, read_body
from gateway.responses import EnvelopeEvent, json_response
from gateway.routes._runs import (agent_target, completion_webhook, json_field, load_session, respond, session_target,
                                  start_in_background)


@endpoint(Dialect.ENVELOPE, contract=Contract("Run an agent as a stream of standard envelopes", body=EnvelopeRunBody,
                                              response=EnvelopeEvent, stream=True, accepted=EnvelopeEvent,
                                              tags=("envelope",)))
async def stream(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, EnvelopeRunBody)
    orch, tenant, agent_id = request.app[ORCHESTRATOR], request[TENANT], request.match_info["agent_id"]
    thread_id = body.thread_id or body.session_id or ""
    if thread_id:
        target = session_target(await load_session(orch, tenant, agent_id, thread_id))
    else:
        target = agent_target(agent_id, version_id=body.version_id or "", draft=bool(body.draft))
    req = canvas_pb.RunRequest(agent=target, tenant_id=tenant, query=body.text(), inputs_json=json_field(body.inputs),
                               session_id=thread_id, user_id=body.user_id or tenant,
                               continue_on_disconnect=body.on_disconnect == "continue")
    completion_webhook(req, body.completion_webhook)
    if body.background:
        return await start_in_background(request, req, started)
    return await respond(request, req, EnvelopeRun(thread_id), stream=True)


def started(run_id: str, session_id: str) -> web.Response:
    """`"background": true`'s 202: the envelope the stream would start with, its ids filled in."""
    run = EnvelopeRun(session_id)
    run.run_id = run_id
    return json_response(run.envelope("status", {"status": "run_started", "background": True}), status=202)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/agents/{agent_id}/stream", stream)
