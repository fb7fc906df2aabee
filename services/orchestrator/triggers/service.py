"""The triggers of one replica, built and run together: its scheduler and its webhook deliverer."""

from __future__ import annotations

import redis.asyncio as aioredis

from services.orchestrator.egress.http import OutboundHttp
from services.orchestrator.runs.manager import RunManager
from services.orchestrator.store.outbox import Outbox
from services.orchestrator.store.schedules import ScheduleStore
from services.orchestrator.store.schedules import redis_clock
from services.orchestrator.triggers.schedules import Scheduler, wall_clock
from services.orchestrator.triggers.settings import TriggerSettings
from services.orchestrator.triggers.webhooks_out import WebhookDeliverer


class Triggers:
    def __init__(self, redis: aioredis.Redis, manager: RunManager, http: OutboundHttp, settings: TriggerSettings) -> None:
        self.schedules = ScheduleStore(redis)
        self.outbox = Outbox(redis)
        clock = redis_clock(redis, settings.clock_key) if settings.clock_key else wall_clock
        self.scheduler = Scheduler(self.schedules, manager, settings, clock)
        self.deliverer = WebhookDeliverer(self.outbox, http, settings)

    async def start(self) -> None:
        """Once the store is reachable: every replica fires schedules and delivers webhooks."""
        self.scheduler.start()
        self.deliverer.start()

    async def stop(self) -> None:
        """Before the run manager stops: no new run is fired, no delivery left half-recorded."""
        await self.scheduler.stop()
        await self.deliverer.stop()
