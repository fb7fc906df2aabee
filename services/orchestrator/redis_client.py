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


# redis-py's default pool refuses its 101st connection at once ("Too many connections"): a burst of runs (each
# holds one for a command, its journal writer another) failed runs. This pool makes a caller wait for a free
# connection instead, for at most POOL_TIMEOUT_S.
MAX_CONNECTIONS = 256
POOL_TIMEOUT_S = 30


def connect(url: str) -> aioredis.Redis:
    """The process's client (lazy: nothing connects until it is first used)."""
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S)
    return aioredis.Redis(connection_pool=pool)
