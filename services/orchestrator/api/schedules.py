"""ScheduleService: an agent's schedules (store/schedules.py) and firing one now (triggers/schedules.py)."""

from __future__ import annotations

from trellis.canvas.v1 import schedule_service_pb2 as sched_pb
from trellis.canvas.v1 import schedule_service_pb2_grpc as sched_grpc

from services.common.errors import InvalidArgument
from services.orchestrator.api.convert_triggers import apply_fields, schedule_to_proto
from services.orchestrator.api.requests import tenant_of as _tenant
from services.orchestrator.store import AgentStore
from services.orchestrator.store.schedules import ScheduleConfig, ScheduleStore
from services.orchestrator.triggers.schedules import Scheduler, check, next_tick

# a change to any of these counts the next tick from now
_TIMING = {"cron", "timezone", "end_at", "enabled"}


class ScheduleServicer(sched_grpc.ScheduleServiceServicer):
    def __init__(self, agents: AgentStore, store: ScheduleStore, scheduler: Scheduler) -> None:
        self.agents = agents
        self.store = store
        self.scheduler = scheduler

    async def CreateSchedule(self, request, context):
        tenant = _tenant(request)
        if not request.fields.HasField("cron"):
            raise InvalidArgument("cron is required")
        await self.agents.get(tenant, request.agent_id)  # NOT_FOUND for an unknown agent
        config = ScheduleConfig(agent_id=request.agent_id, cron="")
        _, secret = apply_fields(config, request.fields)
        check(config)
        record = await self.store.create(tenant, config, next_tick(config, await self.scheduler.now()))
        return sched_pb.CreateScheduleResponse(schedule=schedule_to_proto(record), webhook_secret=secret)

    async def GetSchedule(self, request, context):
        record = await self.store.get(_tenant(request), request.agent_id, request.schedule_id)
        return sched_pb.GetScheduleResponse(schedule=schedule_to_proto(record))

    async def ListSchedules(self, request, context):
        records = await self.store.list(_tenant(request), request.agent_id)
        return sched_pb.ListSchedulesResponse(schedules=[schedule_to_proto(r) for r in records])

    async def UpdateSchedule(self, request, context):
        record = await self.store.get(_tenant(request), request.agent_id, request.schedule_id)
        changed, secret = apply_fields(record.config, request.fields)
        check(record.config)
        restart = next_tick(record.config, await self.scheduler.now()) if changed & _TIMING else None
        await self.store.save_config(record, restart)
        return sched_pb.UpdateScheduleResponse(schedule=schedule_to_proto(record), webhook_secret=secret)

    async def DeleteSchedule(self, request, context):
        deleted = await self.store.delete(_tenant(request), request.agent_id, request.schedule_id)
        return sched_pb.DeleteScheduleResponse(deleted=deleted)

    async def TriggerSchedule(self, request, context):
        record = await self.store.get(_tenant(request), request.agent_id, request.schedule_id)
        fired = await self.scheduler.trigger(record)
        return sched_pb.TriggerScheduleResponse(run_id=fired.run_id, skipped=fired.skipped, queued=fired.queued)
