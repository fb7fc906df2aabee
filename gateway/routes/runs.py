"""A run's status and a session's runs:

- GET /api/v1/agents/{agent_id}/runs/{run_id}: status (running, waiting_for_user, succeeded, failed,
  cancelled), timestamps, the paused run it resumed (`parent_run_id`), the failure reason, attempts (more than
  one after a replica died and another resumed it), the top-level components finished so far (`path`), and
  while it waits for the user, the component that waits (`waiting_for`);
- GET /api/v1/agents/{agent_id}/sessions/{session_id}/runs: the session's runs, newest first.

A run's events are rejoined on the completion routes themselves, with the `Last-Event-ID` header.
"""

from __future__ import annotations

from aiohttp import web
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.orchestrator import ORCHESTRATOR
from gateway.responses import RunOut
from gateway.routes._views import ok

_TAGS = ("runs",)


def run_view(run: canvas_pb.RunInfo) -> dict:
    return {"id": run.run_id, "session_id": run.session_id, "agent_id": run.agent_id, "status": run.status,
            "error": run.error or None, "started_at": run.started_at, "finished_at": run.finished_at or None,
            "parent_run_id": run.parent_run_id or None, "attempts": run.attempts, "path": list(run.path),
            "waiting_for": run.waiting_for or None}


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


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/agents/{agent_id}/runs/{run_id}", get_run)
    app.router.add_get("/api/v1/agents/{agent_id}/sessions/{session_id}/runs", list_session_runs)
