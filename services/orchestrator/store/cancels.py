"""Cancels reach every replica: a run's cancel is published on one channel (`RunStore.request_cancel`), and each
replica's listener hands the run ids to its own runs."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import redis.asyncio as aioredis

from services.common.logs import Outage
from services.orchestrator.store import keys

log = logging.getLogger(__name__)


class CancelListener:
    """Subscribes once per process; calls `on_cancel(run_id)` for every cancel published by any replica."""

    def __init__(self, redis: aioredis.Redis, on_cancel: Callable[[str], None],
                 on_subscribed: Callable[[], Awaitable[None]] | None = None) -> None:
        self.redis = redis
        self.on_cancel = on_cancel
        self.on_subscribed = on_subscribed  # after every (re)subscribe: catch cancels sent while away
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._outage = Outage(log, "cancel listener lost Redis; resubscribing")

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="cancel-listener")
        await asyncio.wait_for(self._ready.wait(), 10)

    async def _listen(self) -> None:
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(keys.CANCEL_CHANNEL)
                    self._outage.ok()
                    self._ready.set()
                    if self.on_subscribed is not None:
                        await self.on_subscribed()
                    async for msg in pubsub.listen():
                        if msg.get("type") == "message":
                            self.on_cancel(msg["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception:
                self._outage.failed()
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
