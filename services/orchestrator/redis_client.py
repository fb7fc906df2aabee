"""The orchestrator's Redis connection: opened at start-up, and health stays NOT_SERVING until it answers."""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from services.common.errors import Unavailable

log = logging.getLogger(__name__)


async def connect(url: str, attempts: int = 50, delay_s: float = 0.2) -> aioredis.Redis:
    client = aioredis.from_url(url, decode_responses=False)
    for attempt in range(attempts):
        try:
            await client.ping()
            return client
        except (ConnectionError, OSError, aioredis.ConnectionError) as exc:
            if attempt == attempts - 1:
                await client.aclose()
                raise Unavailable(f"Redis at {url} is not reachable: {exc}") from exc
            await asyncio.sleep(delay_s)
    raise AssertionError("unreachable")
