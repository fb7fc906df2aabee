"""A2A push-notification configs beside the completion webhooks' outbox (store/outbox.py): what
triggers/a2a_push.py turns into deliveries of the same outbox.

- A task's configs are a hash beside the task's first run (config id -> JSON {id, url, token, auth_scheme,
  auth_credentials, created_at}), kept as long as the run.
- What a run ended with (its answer, references, what it asks, its session) is stored on the pipeline that
  stores its end (`queue_run_end`, runs/ending.py), beside the run and as long as it: the Task a push carries.
- A config set after the task's newest run ended asks for that end again (`notify_again`): the fan-out makes
  the deliveries it has not made yet (their ids derive from run, event and target).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from services.orchestrator.store import keys
from services.orchestrator.store.runs import RUN_TTL_S


def configs_key(tenant: str, task_id: str) -> str:
    return f"{keys.run(tenant, task_id)}:a2a_push"


def run_end_key(tenant: str, run_id: str) -> str:
    return f"{keys.run(tenant, run_id)}:end"


def queue_run_end(pipe: aioredis.client.Pipeline, tenant: str, run_id: str, end: dict[str, Any]) -> None:
    """On `pipe`: what the run ended with, for the A2A pushes of its task."""
    pipe.set(run_end_key(tenant, run_id), json.dumps(end, ensure_ascii=False), ex=RUN_TTL_S)


class PushConfigStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def set(self, tenant: str, task_id: str, config: dict[str, Any]) -> None:
        key = configs_key(tenant, task_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, config["id"], json.dumps(config))
            pipe.expire(key, RUN_TTL_S)
            await pipe.execute()

    async def list(self, tenant: str, task_id: str) -> list[dict[str, Any]]:
        """The task's configs, oldest first."""
        raw = await self.redis.hvals(configs_key(tenant, task_id))
        return sorted((json.loads(r) for r in raw), key=lambda c: (c.get("created_at", 0), c["id"]))

    async def delete(self, tenant: str, task_id: str, config_id: str = "") -> int:
        """The task's config `config_id`, or all of them. How many were deleted."""
        key = configs_key(tenant, task_id)
        if config_id:
            return int(await self.redis.hdel(key, config_id))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hlen(key)
            pipe.delete(key)
            count, _ = await pipe.execute()
        return int(count)

    async def run_end(self, tenant: str, run_id: str) -> dict[str, Any]:
        raw = await self.redis.get(run_end_key(tenant, run_id))
        return json.loads(raw) if raw else {}

    async def notify_again(self, tenant: str, run_id: str, status: str) -> None:
        """The run's end, fanned out again (store/outbox.py's notice): deliveries already made stay as they are."""
        await self.redis.zadd(keys.WEBHOOK_NOTICES, {f"{tenant}/{run_id}/{status}": time.time()})
