"""Schedules: an agent run on a 5-field cron in a time zone, fired by exactly one replica per tick.

Every replica runs a `Scheduler`. Each pass claims the schedules due at its clock's "now" (store/schedules.py
says how a tick is claimed, started and advanced, so that two replicas never both fire it and a replica dying
in the middle loses nothing: schedules and their next ticks live in Redis). A fired run is an ordinary run,
started through the run manager with its own id (`<schedule id>-<tick>`), `continue_on_disconnect`, and the
schedule's completion webhook; this replica follows its events to the end like any caller.

At a tick:
- found later than `misfire_grace_s` (no replica was running): `catch_up` run_once fires it (once, however
  many ticks were missed), skip counts it skipped; either way the next tick is the first one after now;
- the schedule's previous run still going: `overlap` skip counts it skipped, cancel cancels that run and fires,
  enqueue keeps one tick pending (a flag) and fires it when that run has ended;
- past `end_at` there is no next tick: the schedule stays, with `next_fire_at` 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import AsyncIterator, Awaitable, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from services.common.errors import AlreadyExists, InvalidArgument
from services.orchestrator.runs.manager import RunManager, RunSpec
from services.orchestrator.store.schedules import ScheduleConfig, ScheduleRecord, ScheduleStore
from services.orchestrator.triggers.settings import TriggerSettings

log = logging.getLogger(__name__)

OVERLAP = ("skip", "enqueue", "cancel")
CATCH_UP = ("run_once", "skip")
CLAIM_LEASE_S = 60.0  # a replica that claimed a due schedule and died: another looks at it after this

Clock = Callable[[], Awaitable[float]]


async def wall_clock() -> float:
    return time.time()


def check(config: ScheduleConfig) -> None:
    """Refuse settings a scheduler could not follow, naming the field."""
    if len(config.cron.split()) != 5 or not croniter.is_valid(config.cron):
        raise InvalidArgument(f"cron {config.cron!r} must be 5 fields: minute hour day-of-month month day-of-week")
    try:
        ZoneInfo(config.timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"unknown time zone {config.timezone!r}: use an IANA name such as Europe/Paris") from None
    if config.overlap not in OVERLAP:
        raise InvalidArgument(f"overlap {config.overlap!r}: use one of {', '.join(OVERLAP)}")
    if config.catch_up not in CATCH_UP:
        raise InvalidArgument(f"catch_up {config.catch_up!r}: use one of {', '.join(CATCH_UP)}")
    if config.version_id and config.draft:
        raise InvalidArgument("set version_id or draft, not both")


def next_tick(config: ScheduleConfig, after: float) -> int:
    """The first tick strictly after `after` (epoch seconds), or 0 when disabled or past the end."""
    if not config.enabled:
        return 0
    start = datetime.fromtimestamp(after, ZoneInfo(config.timezone or "UTC"))
    tick = int(croniter(config.cron, start).get_next(float))
    return 0 if config.end_at and tick > config.end_at else tick


@dataclass
class Fired:
    run_id: str = ""
    skipped: bool = False
    queued: bool = False


class Scheduler:
    def __init__(self, store: ScheduleStore, manager: RunManager, settings: TriggerSettings,
                 clock: Clock = wall_clock) -> None:
        self.store = store
        self.manager = manager
        self.settings = settings
        self.now = clock
        self._task: asyncio.Task | None = None
        self._runs: set[asyncio.Task] = set()  # the fired runs this replica follows

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="scheduler")

    async def stop(self) -> None:
        for task in [self._task, *self._runs]:
            if task is not None:
                task.cancel()
        for task in [self._task, *self._runs]:
            if task is not None:
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    async def _loop(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler: a pass failed; trying again")
            await asyncio.sleep(self.settings.scheduler_poll_s)

    async def step(self) -> None:
        """One pass: every schedule due now, handled once by this replica."""
        now = await self.now()
        for tenant, schedule_id in await self.store.claim_due(now, CLAIM_LEASE_S):
            try:
                await self._handle(tenant, schedule_id, now)
            except Exception:
                log.exception("schedule %s of tenant %s: could not handle its tick", schedule_id, tenant)

    # ------------------------------------------------------------------ a due schedule
    async def _handle(self, tenant: str, schedule_id: str, now: float) -> None:
        record = await self.store.find(tenant, schedule_id)
        if record is None:
            await self.store.due_at(tenant, schedule_id, None)
            return
        if record.pending_tick and not await self._going(record):
            await self._fire(record, record.pending_tick, now, pending=True)
            record = await self.store.find(tenant, schedule_id) or record
        tick = record.next_fire_at
        if record.config.enabled and tick and tick <= now:
            await self._tick(record, tick, now)
            record = await self.store.find(tenant, schedule_id) or record
        if record.pending_tick:
            when: float | None = now  # look again at the next pass: has the previous run ended?
        else:
            when = record.next_fire_at if record.config.enabled and record.next_fire_at else None
        await self.store.due_at(tenant, schedule_id, when)

    async def _tick(self, record: ScheduleRecord, tick: int, now: float) -> None:
        config, following = record.config, next_tick(record.config, max(now, tick))
        if now - tick > self.settings.misfire_grace_s and config.catch_up == "skip":
            log.info("schedule %s: tick %d missed while no replica ran; skipped", record.id, tick)
            await self.store.advance(record.tenant_id, record.id, "next_fire_at", tick, following, skipped=1)
            return
        if await self._going(record):
            if config.overlap == "skip":
                await self.store.advance(record.tenant_id, record.id, "next_fire_at", tick, following, skipped=1)
                return
            if config.overlap == "enqueue":
                await self.store.advance(record.tenant_id, record.id, "next_fire_at", tick, following,
                                         pending_tick=record.pending_tick or tick)
                return
            await self.manager.cancel(record.tenant_id, run_id=record.last_run_id)
        await self._fire(record, tick, now, following=following)

    async def _fire(self, record: ScheduleRecord, tick: int, now: float, *, following: int = 0,
                    pending: bool = False) -> None:
        """Fire `tick` if this replica claims it: the run (its id from the tick), then the schedule advanced."""
        if not await self.store.claim_tick(record.tenant_id, record.id, tick, pending=pending):
            return
        run_id = f"{record.id}-{'q' if pending else ''}{tick}"
        try:
            await self._start(record, run_id)
        except AlreadyExists:  # started by a replica that died before it advanced the schedule
            pass
        except Exception as exc:  # the agent or its version is gone, ...: the tick is spent, the reason logged
            log.warning("schedule %s: tick %d could not start its run: %s", record.id, tick, exc)
        if pending:
            await self.store.advance(record.tenant_id, record.id, "pending_tick", tick, 0,
                                     last_run_id=run_id, last_fired_at=now)
        else:
            await self.store.advance(record.tenant_id, record.id, "next_fire_at", tick, following,
                                     last_run_id=run_id, last_fired_at=now)

    async def _going(self, record: ScheduleRecord) -> bool:
        if not record.last_run_id:
            return False
        return (await self.manager.runs.status(record.tenant_id, record.last_run_id)).get("status") == "running"

    async def _start(self, record: ScheduleRecord, run_id: str) -> None:
        """An ordinary run, through the run manager; this replica follows it as its caller."""
        config = record.config
        webhook = {**config.webhook, "source": "schedule", "schedule_id": record.id} if config.webhook else None
        spec = RunSpec(tenant_id=record.tenant_id, run_id=run_id, agent_id=config.agent_id,
                       version_id=config.version_id, draft=config.draft, query=config.query,
                       inputs=dict(config.inputs), user_id=config.user_id or record.tenant_id,
                       continue_on_disconnect=True, completion_webhook=webhook)
        events = self.manager.execute(spec)
        await events.__anext__()  # the run started (a refusal raises here)
        task = asyncio.create_task(_follow(events), name=f"scheduled-run-{run_id}")
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    # ------------------------------------------------------------------ the API's
    async def trigger(self, record: ScheduleRecord) -> Fired:
        """A run now, beside the ticks; the overlap policy applies as at a tick."""
        now = await self.now()
        if await self._going(record):
            if record.config.overlap == "skip":
                return Fired(skipped=True)
            if record.config.overlap == "enqueue":
                tick = int(now)
                if not record.pending_tick:
                    await self.store.advance(record.tenant_id, record.id, "pending_tick", 0, tick)
                    await self.store.due_at(record.tenant_id, record.id, now)
                return Fired(queued=True)
            await self.manager.cancel(record.tenant_id, run_id=record.last_run_id)
        run_id = f"{record.id}-now-{uuid.uuid4().hex[:8]}"
        await self._start(record, run_id)
        await self.store.advance(record.tenant_id, record.id, "last_run_id", record.last_run_id or "", run_id,
                                 last_fired_at=now)
        return Fired(run_id=run_id)


async def _follow(events: AsyncIterator) -> None:
    async with aclosing(events):  # type: ignore[type-var]
        async for _ in events:
            pass
