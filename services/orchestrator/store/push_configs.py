"""A2A push-notification configs beside the completion webhooks' outbox (store/outbox.py): what
triggers/a2a_push.py turns into deliveries of the same outbox.

- A task's configs are a hash beside the task's first run (config id -> JSON {id, url, token, auth_scheme,
  auth_credentials, created_at}), kept as long as the run.
- What a push carries is read when the deliverer fans a run's end out, only for a run whose task has configs,
  from what the run's end stored anyway (`turns`): its turn in its session (the assistant message whose id is
  the run's: its answer and references) and, for a run waiting for the user, its journal's last events (the
  UserInputRequired with what it asks).
- A config set after the task's newest run ended asks for that end again (`notify_again`): the fan-out makes
  the deliveries it has not made yet (their ids derive from run, event and target).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from services.orchestrator.store import keys
from services.orchestrator.store import runs as run_store  # (a module: runs.py imports the outbox, which imports this)

# How many of a waiting run's last journal events are read for its UserInputRequired (it ends the run but for
# the run's own end events).
LAST_EVENTS = 50


def configs_key(tenant: str, task_id: str) -> str:
    return f"{keys.run(tenant, task_id)}:a2a_push"


class PushConfigStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    @staticmethod
    def queue_list(pipe: aioredis.client.Pipeline, tenant: str, task_id: str) -> None:
        """`list` on `pipe`; its reply goes to `parse`."""
        pipe.hvals(configs_key(tenant, task_id))

    @staticmethod
    def parse(raw: list[bytes]) -> list[dict[str, Any]]:
        return sorted((json.loads(r) for r in raw), key=lambda c: (c.get("created_at", 0), c["id"]))

    async def set(self, tenant: str, task_id: str, config: dict[str, Any]) -> None:
        key = configs_key(tenant, task_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, config["id"], json.dumps(config))
            pipe.expire(key, run_store.RUN_TTL_S)
            await pipe.execute()

    async def list(self, tenant: str, task_id: str) -> list[dict[str, Any]]:
        """The task's configs, oldest first."""
        return self.parse(await self.redis.hvals(configs_key(tenant, task_id)))

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

    async def turns(self, runs: list[tuple[str, str, str, bool]]) -> list[tuple[list[bytes], list[bytes]]]:
        """For each of `runs` [(tenant, run id, session id, waiting)], in one round trip: its session's messages
        (JSON) and, when `waiting`, its journal's last events (encoded, newest first)."""
        if not runs:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, run_id, session_id, waiting in runs:
                if session_id:
                    pipe.lrange(keys.session_messages(tenant, session_id), 0, -1)
                if waiting:
                    pipe.xrevrange(keys.run_events(tenant, run_id), "+", "-", count=LAST_EVENTS)
            replies = iter(await pipe.execute())
        out = []
        for _, _, session_id, waiting in runs:
            messages = next(replies) if session_id else []
            events = [fields.get(b"e", b"") for _, fields in next(replies)] if waiting else []
            out.append((messages, events))
        return out

    async def notify_again(self, tenant: str, run_id: str, status: str) -> None:
        """The run's end, fanned out again (store/outbox.py's notice): deliveries already made stay as they are."""
        await self.redis.zadd(keys.WEBHOOK_NOTICES, {f"{tenant}/{run_id}/{status}": time.time()})
