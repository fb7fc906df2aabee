"""The cancel listener while its Redis is away: it tries again every half second, and says so once with the
failure's trace (then a line a minute, logs.Outage), not a trace every try."""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from services.orchestrator.store.cancels import CancelListener
from tests.support.net import free_port
from tests.support.waiting import eventually


async def test_a_redis_that_stays_away_is_told_once_not_every_try(caplog):
    client = aioredis.Redis(host="127.0.0.1", port=free_port())  # nothing listens there
    listener = CancelListener(client, lambda run_id: None)
    caplog.set_level(logging.WARNING, logger="services.orchestrator.store.cancels")
    task = asyncio.create_task(listener._listen())
    try:
        await eventually(lambda: listener._outage._failures >= 3, what="three failed tries")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
    told = [r for r in caplog.records if r.name == "services.orchestrator.store.cancels"]
    assert len(told) == 1 and told[0].exc_info is not None
