"""The orchestrator's Redis connection: health stays NOT_SERVING until Redis answers."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from services.common.errors import Unavailable


async def wait_until_ready(client: aioredis.Redis, url: str, attempts: int = 50, delay_s: float = 0.2) -> None:
    for attempt in range(attempts):
        try:
            await client.ping()
            return
        except (OSError, aioredis.ConnectionError) as exc:
            if attempt == attempts - 1:
                raise Unavailable(f"Redis at {url} is not reachable: {exc}") from exc
            await asyncio.sleep(delay_s)
