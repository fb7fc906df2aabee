"""Runs: status and timestamps, and cancellation that reaches whichever replica runs them.

A cancel sets a flag (checked when a run starts) and publishes on one channel that every replica listens to,
so a running run stops within a round trip, not at its next poll.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Awaitable, Callable

import redis.asyncio as aioredis

from services.common.errors import AlreadyExists, FailedPrecondition
from services.orchestrator.store import keys

log = logging.getLogger(__name__)

RUN_TTL_S = 7 * 24 * 3600
# What a run's trace keeps: every tool call (tool, arguments, result, error, elapsed) and every Agent
# reasoning step (thought, tool, input, observation, position).
LOG_KINDS = ("tool_calls", "thoughts")
CANCEL_TTL_S = 600
# A session is claimed for at most this long: longer than any run may take (gateway 900 s, Agent 1200 s),
# short enough that a crashed replica's claim frees itself.
SESSION_CLAIM_TTL_S = 3600
_RELEASE_IF_HOLDER = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RunStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def start(self, tenant: str, run_id: str, session_id: str, agent_id: str = "") -> None:
        """Record the run and claim its session: one run at a time per session, or turns would overwrite
        each other's state. A second run on a busy session fails at once, naming the run that holds it."""
        if session_id and not await self.redis.set(
                keys.session_active_run(tenant, session_id), run_id, nx=True, ex=SESSION_CLAIM_TTL_S):
            holder = await self.redis.get(keys.session_active_run(tenant, session_id))
            raise FailedPrecondition(
                f"session {session_id!r} is busy with run {(holder or b'?').decode()!r}: wait for it to finish or cancel it")
        if not await self.redis.hsetnx(keys.run(tenant, run_id), "status", "running"):
            await self._release(tenant, session_id, run_id)
            raise AlreadyExists(f"run {run_id!r} already exists: run ids must be unique")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.run(tenant, run_id), mapping={"session_id": session_id, "agent_id": agent_id,
                                                         "started_at": time.time(), "finished_at": "", "error": ""})
            pipe.expire(keys.run(tenant, run_id), RUN_TTL_S)
            await pipe.execute()

    async def finish(self, tenant: str, run_id: str, session_id: str, *, status: str, error: str = "") -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.run(tenant, run_id), mapping={"status": status, "finished_at": time.time(), "error": error})
            pipe.delete(keys.cancel_flag(run_id))
            await pipe.execute()
        await self._release(tenant, session_id, run_id)

    async def _release(self, tenant: str, session_id: str, run_id: str) -> None:
        """Free the session, but only if this run still holds it (compare-and-delete, atomically)."""
        if session_id:
            await self.redis.eval(_RELEASE_IF_HOLDER, 1, keys.session_active_run(tenant, session_id), run_id)

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

    def __init__(self, redis: aioredis.Redis, on_cancel: Callable[[str], None],
                 on_subscribed: Callable[[], Awaitable[None]] | None = None) -> None:
        self.redis = redis
        self.on_cancel = on_cancel
        self.on_subscribed = on_subscribed  # after every (re)subscribe: catch cancels sent while away
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
                    if self.on_subscribed is not None:
                        await self.on_subscribed()
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
