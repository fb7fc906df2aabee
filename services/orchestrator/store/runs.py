"""Runs: status and timestamps, and cancellation that reaches whichever replica runs them.

A cancel sets a flag (checked when a run starts) and publishes on one channel that every replica listens to,
so a running run stops within a round trip, not at its next poll.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

import redis.asyncio as aioredis

from services.orchestrator.store import keys

log = logging.getLogger(__name__)

RUN_TTL_S = 7 * 24 * 3600
# What a run's trace keeps: every tool call (tool, arguments, result, error, elapsed) and every Agent
# reasoning step (thought, tool, input, observation, position).
LOG_KINDS = ("tool_calls", "thoughts")
CANCEL_TTL_S = 600


class RunStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def start(self, tenant: str, run_id: str, session_id: str, agent_id: str = "") -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.run(tenant, run_id), mapping={"status": "running", "session_id": session_id, "agent_id": agent_id,
                                                         "started_at": time.time(), "finished_at": "", "error": ""})
            pipe.expire(keys.run(tenant, run_id), RUN_TTL_S)
            if session_id:
                pipe.set(keys.session_active_run(tenant, session_id), run_id, ex=RUN_TTL_S)
            await pipe.execute()

    async def finish(self, tenant: str, run_id: str, session_id: str, *, status: str, error: str = "") -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.run(tenant, run_id), mapping={"status": status, "finished_at": time.time(), "error": error})
            pipe.delete(keys.cancel_flag(run_id))
            await pipe.execute()
        if session_id:
            # Only clear the pointer if it still names this run (a newer run may have replaced it).
            if (await self.redis.get(keys.session_active_run(tenant, session_id))) == run_id.encode():
                await self.redis.delete(keys.session_active_run(tenant, session_id))

    async def append_log(self, tenant: str, run_id: str, kind: str, entries: list[dict]) -> None:
        """A run's trace of one `kind` (LOG_KINDS), kept as long as the run record."""
        if not entries:
            return
        key = keys.run_log(tenant, run_id, kind)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, *(json.dumps(e, ensure_ascii=False, default=str) for e in entries))
            pipe.expire(key, RUN_TTL_S)
            await pipe.execute()

    async def read_log(self, tenant: str, run_id: str, kind: str) -> list[dict]:
        return [json.loads(raw) for raw in await self.redis.lrange(keys.run_log(tenant, run_id, kind), 0, -1)]

    async def status(self, tenant: str, run_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(keys.run(tenant, run_id))
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def request_cancel(self, tenant: str, *, run_id: str = "", session_id: str = "") -> bool:
        """True when a running run was found and told to stop."""
        if not run_id and session_id:
            found = await self.redis.get(keys.session_active_run(tenant, session_id))
            run_id = found.decode() if found else ""
        if not run_id:
            return False
        info = await self.status(tenant, run_id)
        if info.get("status") != "running":
            return False
        await self.redis.set(keys.cancel_flag(run_id), "1", ex=CANCEL_TTL_S)
        await self.redis.publish(keys.CANCEL_CHANNEL, run_id)
        return True

    async def is_cancelled(self, run_id: str) -> bool:
        return bool(await self.redis.exists(keys.cancel_flag(run_id)))


class CancelListener:
    """Subscribes once per process; calls `on_cancel(run_id)` for every cancel published by any replica."""

    def __init__(self, redis: aioredis.Redis, on_cancel: Callable[[str], None]) -> None:
        self.redis = redis
        self.on_cancel = on_cancel
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="cancel-listener")
        await asyncio.wait_for(self._ready.wait(), 10)

    async def _listen(self) -> None:
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(keys.CANCEL_CHANNEL)
                    self._ready.set()
                    async for msg in pubsub.listen():
                        if msg.get("type") == "message":
                            self.on_cancel(msg["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cancel listener lost Redis; resubscribing")
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
