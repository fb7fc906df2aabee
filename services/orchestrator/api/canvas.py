"""CanvasService: runs (start, cancel, rejoin, status, logs), canvas validation and a tenant's admission figures, over the run manager. The
gateway starts its runs as turns of the internal RunTurnService instead (api/run_turns.py), each served as a Run."""

from __future__ import annotations

from contextlib import aclosing

from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import events_pb2 as ev_pb

from services.common.errors import InvalidArgument
from services.common.json_fields import dumps
from services.orchestrator.api.convert import (
    issues_to_proto,
    numbered_to_proto,
    run_info_to_proto,
    run_log_to_proto,
    run_spec_from_proto,
)
from services.orchestrator.api.requests import tenant_of as _tenant
from services.orchestrator.engine.dsl import DslError, ValidationIssue, load_canvas
from services.orchestrator.engine.validate import validate
from services.orchestrator.runs.manager import RunManager


class CanvasServicer(canvas_grpc.CanvasServiceServicer):
    def __init__(self, runs: RunManager) -> None:
        self.runs = runs

    async def Run(self, request, context):
        # Answer deltas produced while the previous event is being written go out as one event (RunManager.execute).
        async for item in self.runs.execute(run_spec_from_proto(request)):
            yield numbered_to_proto(item)

    async def Cancel(self, request, context):
        target = request.WhichOneof("target")
        if target is None:
            raise InvalidArgument("run_id or session_id is required")
        cancelled = await self.runs.cancel(_tenant(request), run_id=request.run_id, session_id=request.session_id)
        return canvas_pb.CancelResponse(cancelled=cancelled)

    async def WatchRun(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        async with aclosing(self.runs.watch(_tenant(request), request.run_id, request.after_seq)) as stored:
            async for data in stored:
                event = ev_pb.RunEvent.FromString(data)
                yield event
                if event.WhichOneof("kind") == "run_finished":
                    return

    async def GetRun(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        info, path = await self.runs.queries.get_run(_tenant(request), request.run_id, request.agent_id)
        return canvas_pb.GetRunResponse(run=run_info_to_proto(request.run_id, info, path))

    async def ListRuns(self, request, context):
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        runs = await self.runs.queries.list_runs(_tenant(request), request.session_id, request.agent_id)
        return canvas_pb.ListRunsResponse(runs=[run_info_to_proto(run_id, info, []) for run_id, info in runs])

    async def ListInterrupts(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        found = await self.runs.interrupts.list(_tenant(request), request.run_id, request.agent_id)
        return canvas_pb.ListInterruptsResponse(interrupts=[canvas_pb.Interrupt(
            id=i["id"], run_id=i["run_id"], component=i["component"], form_json=dumps(i["form"]), tips=i["tips"],
            expires_at=i["expires_at"], status=i["status"], on_timeout=i["on_timeout"]) for i in found])

    async def GetTenantAdmission(self, request, context):
        found = await self.runs.limits.admission(_tenant(request))
        limits = found.limits
        return canvas_pb.GetTenantAdmissionResponse(
            admitted=found.admitted, refused=sum(found.refused_by_limit.values()),
            refused_by_limit=found.refused_by_limit, waiting=found.waiting, running=found.running,
            llm_tokens_last_minute=found.tokens_last_minute, llm_tokens=found.tokens, replicas=found.replicas,
            limits=canvas_pb.TenantLimits(
                concurrent_runs=limits.concurrent_runs, runs_per_second=limits.runs_per_second, burst=limits.burst,
                tokens_per_minute=limits.tokens_per_minute, held_streams=limits.held_streams,
                weight=found.share.weight, priority=found.share.priority))

    async def GetRunLog(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        info, tool_calls, thoughts = await self.runs.queries.run_log(_tenant(request), request.run_id, request.agent_id)
        return run_log_to_proto(request.run_id, info, tool_calls, thoughts)

    async def Validate(self, request, context):
        if not request.dsl_json.strip():
            raise InvalidArgument("dsl_json is required")
        try:
            canvas = load_canvas(request.dsl_json)
        except DslError as exc:
            return issues_to_proto([ValidationIssue("", exc.where, str(exc).split(": ", 1)[-1])])
        return issues_to_proto(validate(canvas))
