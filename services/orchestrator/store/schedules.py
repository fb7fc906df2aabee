"""Schedules in Redis: each a hash under its tenant's tag, indexed per agent, and one due set every replica's
scheduler reads (triggers/schedules.py).

A schedule's hash holds its settings (`config`, JSON) and its state: `next_fire_at` (whole epoch seconds of the
next tick, "0" when disabled or past its end), `pending_tick` (overlap=enqueue: a tick waiting for the previous
run), `last_run_id`, `last_fired_at`, `skipped` (ticks not fired). Exactly one replica fires a tick:

1. `claim_due` takes due members of `SCHEDULES_DUE` atomically, pushing their score a lease ahead, so two
   replicas never work on the same schedule at once (a replica that dies leaves it to the next after the lease);
2. `claim_tick` sets the tick's own key (NX, with a lease) and checks the tick is still the schedule's;
3. the run's id comes from the tick (`<schedule>-<tick>`): starting it twice is refused by the run store;
4. `advance` moves `next_fire_at` past the tick only if it is still that tick (compare-and-set).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis

from services.common.errors import NotFound
from services.orchestrator.store import keys
from services.orchestrator.store._records import field as hfield

TICK_CLAIM_MS = 60_000  # a replica that claimed a tick and died: another fires it (same run id) after this

# KEYS: due set. ARGV: now, claimed-until, limit. The due members, each pushed to claimed-until.
_CLAIM_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], m) end
return due
"""
# KEYS: schedule hash, tick key. ARGV: tick, field ('next_fire_at' or 'pending_tick'), claim ms.
# 1 when the tick is still the schedule's and this caller is the one that fires it.
_CLAIM_TICK = """
if redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[1] then return 0 end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then return 0 end
return 1
"""
# KEYS: schedule hash. ARGV: field, expected, new value, then name, value pairs to set with it.
_ADVANCE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
for i = 4, #ARGV, 2 do
  if ARGV[i] == 'skipped' then redis.call('HINCRBY', KEYS[1], 'skipped', 1)
  else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""


@dataclass
class ScheduleConfig:
    """What a schedule is set to (ScheduleFields over gRPC)."""
    agent_id: str
    cron: str
    timezone: str = "UTC"
    end_at: float = 0.0  # epoch seconds, 0: never
    enabled: bool = True
    query: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    version_id: str = ""
    draft: bool = False
    overlap: str = "skip"  # skip, enqueue, cancel
    catch_up: str = "run_once"  # run_once, skip
    webhook: dict[str, Any] | None = None  # {url, events, secret}
    user_id: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class ScheduleRecord:
    id: str
    tenant_id: str
    config: ScheduleConfig
    next_fire_at: int = 0
    pending_tick: int = 0
    last_run_id: str = ""
    last_fired_at: float = 0.0
    skipped: int = 0


def _record(tenant: str, schedule_id: str, raw: dict[bytes, bytes]) -> ScheduleRecord:
    data = json.loads(hfield(raw, "config"))
    return ScheduleRecord(
        id=schedule_id, tenant_id=tenant, config=ScheduleConfig(**data),
        next_fire_at=int(hfield(raw, "next_fire_at") or 0), pending_tick=int(hfield(raw, "pending_tick") or 0),
        last_run_id=hfield(raw, "last_run_id"), last_fired_at=float(hfield(raw, "last_fired_at") or 0),
        skipped=int(hfield(raw, "skipped") or 0))


class ScheduleStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._claim_due = redis.register_script(_CLAIM_DUE)
        self._claim_tick = redis.register_script(_CLAIM_TICK)
        self._advance = redis.register_script(_ADVANCE)

    # ------------------------------------------------------------------ records
    async def create(self, tenant: str, config: ScheduleConfig, next_fire_at: int) -> ScheduleRecord:
        schedule_id = uuid.uuid4().hex
        config.created_at = config.updated_at = time.time()
        key = keys.schedule(tenant, schedule_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping={"config": json.dumps(asdict(config)), "next_fire_at": next_fire_at,
                                    "pending_tick": 0, "last_run_id": "", "last_fired_at": 0, "skipped": 0})
            pipe.zadd(keys.agent_schedules(tenant, config.agent_id), {schedule_id: config.created_at})
            if next_fire_at:
                pipe.zadd(keys.SCHEDULES_DUE, {f"{tenant}/{schedule_id}": next_fire_at})
            await pipe.execute()
        return ScheduleRecord(id=schedule_id, tenant_id=tenant, config=config, next_fire_at=next_fire_at)

    async def find(self, tenant: str, schedule_id: str) -> ScheduleRecord | None:
        raw = await self.redis.hgetall(keys.schedule(tenant, schedule_id))
        return _record(tenant, schedule_id, raw) if raw else None

    async def get(self, tenant: str, agent_id: str, schedule_id: str) -> ScheduleRecord:
        record = await self.find(tenant, schedule_id)
        if record is None or record.config.agent_id != agent_id:
            raise NotFound(f"schedule {schedule_id!r} not found for agent {agent_id!r}")
        return record

    async def list(self, tenant: str, agent_id: str) -> list[ScheduleRecord]:
        ids = [i.decode() for i in await self.redis.zrange(keys.agent_schedules(tenant, agent_id), 0, -1)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for schedule_id in ids:
                pipe.hgetall(keys.schedule(tenant, schedule_id))
            raws = await pipe.execute()
        return [_record(tenant, i, raw) for i, raw in zip(ids, raws) if raw]

    async def save_config(self, record: ScheduleRecord, next_fire_at: int | None) -> None:
        """New settings; `next_fire_at` (when not None) restarts its ticks from there."""
        record.config.updated_at = time.time()
        key = keys.schedule(record.tenant_id, record.id)
        member = f"{record.tenant_id}/{record.id}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, "config", json.dumps(asdict(record.config)))
            if next_fire_at is not None:
                record.next_fire_at = next_fire_at
                pipe.hset(key, "next_fire_at", next_fire_at)
                if next_fire_at:
                    pipe.zadd(keys.SCHEDULES_DUE, {member: next_fire_at})
                elif not record.pending_tick:
                    pipe.zrem(keys.SCHEDULES_DUE, member)
            await pipe.execute()

    async def delete(self, tenant: str, agent_id: str, schedule_id: str) -> bool:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(keys.schedule(tenant, schedule_id))
            pipe.zrem(keys.agent_schedules(tenant, agent_id), schedule_id)
            pipe.zrem(keys.SCHEDULES_DUE, f"{tenant}/{schedule_id}")
            deleted, *_ = await pipe.execute()
        return bool(deleted)

    # ------------------------------------------------------------------ the scheduler's
    async def claim_due(self, now: float, lease_s: float, limit: int = 20) -> list[tuple[str, str]]:
        """(tenant, schedule id) of schedules due at `now`, claimed for `lease_s` (of the same clock)."""
        members = await self._claim_due(keys=[keys.SCHEDULES_DUE], args=[now, now + lease_s, limit])
        return [tuple(m.decode().split("/", 1)) for m in members]  # type: ignore[misc]

    async def due_at(self, tenant: str, schedule_id: str, when: float | None) -> None:
        """When the scheduler should look at the schedule next (None: never, until it changes)."""
        member = f"{tenant}/{schedule_id}"
        if when is None:
            await self.redis.zrem(keys.SCHEDULES_DUE, member)
        else:
            await self.redis.zadd(keys.SCHEDULES_DUE, {member: when})

    async def claim_tick(self, tenant: str, schedule_id: str, tick: int, *, pending: bool = False) -> bool:
        """Whether this caller fires `tick` (the schedule's next tick, or its pending one)."""
        return bool(await self._claim_tick(
            keys=[keys.schedule(tenant, schedule_id), keys.schedule_tick(tenant, schedule_id, tick)],
            args=[tick, "pending_tick" if pending else "next_fire_at", TICK_CLAIM_MS]))

    async def advance(self, tenant: str, schedule_id: str, field_name: str, expected: int, new: int,
                      **values: Any) -> bool:
        """Compare-and-set of `next_fire_at` or `pending_tick`, with other fields (`skipped=1` counts one)."""
        pairs = [x for kv in values.items() for x in kv]
        return bool(await self._advance(keys=[keys.schedule(tenant, schedule_id)],
                                        args=[field_name, expected, new, *pairs]))


def redis_clock(redis: aioredis.Redis, key: str):
    """Tests: "now" is the number in `key` (the wall clock while it holds none), the same for every replica
    (triggers/schedules.py's `Clock`)."""
    async def now() -> float:
        raw = await redis.get(key)
        return float(raw) if raw else time.time()

    return now
