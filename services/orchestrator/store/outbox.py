"""The completion webhooks' durable outbox in Redis (triggers/webhooks_out.py delivers from it).

- A run's end queues a notice (`queue_notice`, on the pipeline that stores the end: a run that ended always
  has one): a member "<tenant>/<run>/<status>" of `WEBHOOK_NOTICES`. That is runs/ending.py for a run its
  engine ended, and `RunStore.finish` for one ended without its engine (cancelled while it waited for the
  user or after its owner died, failed because it could not be resumed).
- A deliverer claims notices (`claim`: atomically pushed a lease ahead, so one replica at a time works on
  each), many at once, and turns them into their runs' deliveries, one per webhook that wants the event: it
  reads what they need in one round trip for all of them (`run_records`, then `hooks_and_configs`) and writes
  every delivery and drops the notices in one more (`add_deliveries`: their ids derive from the run, the event
  and the target, so doing it twice writes nothing new). A notice it could not handle stays claimed until its
  lease is over, then is claimed again.
- Each delivery is a JSON entry of the run's `deliveries` hash (its attempts with it, kept as long as the run)
  and a member of `WEBHOOK_DUE` scored by its next attempt, claimed the same way.
- An agent's webhook is one JSON string beside the agent.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

import redis.asyncio as aioredis

from services.common.errors import NotFound
from services.orchestrator.store import keys
from services.orchestrator.store import runs as run_store  # (a module: runs.py queues notices with a run's end)
from services.orchestrator.store.push_configs import PushConfigStore
from services.orchestrator.store.schedules import _CLAIM_DUE


def queue_notice(pipe: aioredis.client.Pipeline, tenant: str, run_id: str, status: str) -> None:
    """On `pipe`: the run ended with `status`; its webhooks (if any) are to be notified."""
    pipe.zadd(keys.WEBHOOK_NOTICES, {f"{tenant}/{run_id}/{status}": time.time()})


class Outbox:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._claim = redis.register_script(_CLAIM_DUE)

    # ------------------------------------------------------------------ agents' webhooks
    async def set_agent_webhook(self, tenant: str, agent_id: str, webhook: dict[str, Any]) -> None:
        await self.redis.set(keys.agent_webhook(tenant, agent_id), json.dumps(webhook))

    async def agent_webhook(self, tenant: str, agent_id: str) -> dict[str, Any] | None:
        raw = await self.redis.get(keys.agent_webhook(tenant, agent_id))
        return json.loads(raw) if raw else None

    async def delete_agent_webhook(self, tenant: str, agent_id: str) -> bool:
        return bool(await self.redis.delete(keys.agent_webhook(tenant, agent_id)))

    # ------------------------------------------------------------------ notices and deliveries
    async def claim(self, due_set: str, lease_s: float, limit: int = 20) -> list[list[str]]:
        """Members of `due_set` (WEBHOOK_NOTICES or WEBHOOK_DUE) due now, split on "/", claimed for `lease_s`."""
        now = time.time()
        members = await self._claim(keys=[due_set], args=[now, now + lease_s, limit])
        return [m.decode().split("/", 2) for m in members]

    async def run_records(self, runs: list[tuple[str, str]]) -> list[dict[str, str]]:
        """The records of `runs` [(tenant, run id)] in one round trip ({} for a run gone)."""
        if not runs:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, run_id in runs:
                pipe.hgetall(keys.run(tenant, run_id))
            replies = await pipe.execute()
        return [{k.decode(): v.decode() for k, v in raw.items()} for raw in replies]

    async def hooks_and_configs(self, agents: Iterable[tuple[str, str]], tasks: Iterable[tuple[str, str]]
                                ) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[tuple[str, str], list]]:
        """In one round trip: the webhooks of `agents` [(tenant, agent id)] (those that have one) and the A2A
        push configs of `tasks` [(tenant, task id)] (store/push_configs.py; those that have some)."""
        agents, tasks = list(dict.fromkeys(agents)), list(dict.fromkeys(tasks))
        if not agents and not tasks:
            return {}, {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, agent_id in agents:
                pipe.get(keys.agent_webhook(tenant, agent_id))
            for tenant, task_id in tasks:
                PushConfigStore.queue_list(pipe, tenant, task_id)
            replies = await pipe.execute()
        hooks = {a: json.loads(raw) for a, raw in zip(agents, replies) if raw}
        configs = {t: PushConfigStore.parse(raw) for t, raw in zip(tasks, replies[len(agents):]) if raw}
        return hooks, configs

    async def add_deliveries(self, notices: list[tuple[str, str, str, list[dict[str, Any]]]]) -> None:
        """Each notice's deliveries [(tenant, run id, status, deliveries)] (each once, however often this is
        called), then the notices are done: one round trip."""
        if not notices:
            return
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, run_id, status, deliveries in notices:
                key = keys.run_deliveries(tenant, run_id)
                for d in deliveries:
                    pipe.hsetnx(key, d["id"], json.dumps(d))
                    pipe.zadd(keys.WEBHOOK_DUE, {f"{tenant}/{run_id}/{d['id']}": now}, nx=True)
                if deliveries:
                    pipe.expire(key, run_store.RUN_TTL_S)
            pipe.zrem(keys.WEBHOOK_NOTICES, *(f"{tenant}/{run_id}/{status}" for tenant, run_id, status, _ in notices))
            await pipe.execute()

    async def delivery(self, tenant: str, run_id: str, delivery_id: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(keys.run_deliveries(tenant, run_id), delivery_id)
        return json.loads(raw) if raw else None

    async def save_delivery(self, tenant: str, run_id: str, delivery: dict[str, Any]) -> None:
        """The delivery after an attempt: due again at `next_attempt_at` while pending, else out of the due set."""
        member = f"{tenant}/{run_id}/{delivery['id']}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.run_deliveries(tenant, run_id), delivery["id"], json.dumps(delivery))
            if delivery["state"] == "pending":
                pipe.zadd(keys.WEBHOOK_DUE, {member: delivery["next_attempt_at"]})
            else:
                pipe.zrem(keys.WEBHOOK_DUE, member)
            await pipe.execute()

    async def drop(self, due_set: str, member: str) -> None:
        await self.redis.zrem(due_set, member)

    async def run_deliveries(self, tenant: str, run_id: str) -> list[dict[str, Any]]:
        """A run's deliveries, oldest first."""
        if not await self.redis.exists(keys.run(tenant, run_id)):
            raise NotFound(f"run {run_id!r} not found")
        raw = await self.redis.hvals(keys.run_deliveries(tenant, run_id))
        return sorted((json.loads(r) for r in raw), key=lambda d: (d.get("created_at", 0), d["id"]))
