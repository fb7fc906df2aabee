"""Redis hash records: reading a field, and writes that must not resurrect a record deleted in the meantime
(a run finishing after its session was deleted, an update racing a delete): WATCH the record, check it
still exists, then MULTI/EXEC."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import redis.asyncio as aioredis

from services.common.errors import NotFound

def field(raw: dict[bytes, bytes], key: str) -> str:
    """A field of a HGETALL result as text ("" when absent)."""
    return raw.get(key.encode(), b"").decode()


Fill = Callable[[aioredis.client.Pipeline], Awaitable[None]]


async def write_if_exists(redis: aioredis.Redis, key: str, missing: str, fill: Fill, *,
                          also_watch: tuple[str, ...] = ()) -> list:
    """Run the transaction `fill` builds, only while `key` exists; NotFound(missing) otherwise.

    `fill(pipe)` may first read (the pipe is in immediate mode while watching), then must call
    `pipe.multi()` and queue its writes. A concurrent change to a watched key retries the whole thing."""
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                await pipe.watch(key, *also_watch)
                if not await pipe.exists(key):
                    raise NotFound(missing)
                await fill(pipe)
                return await pipe.execute()
            except aioredis.WatchError:
                continue


def queue_script(pipe: aioredis.client.Pipeline, script: Any, keys: list[str], args: list[Any]) -> None:
    """A registered Lua script queued on `pipe` as EVAL with its text. (Queued as a Script, redis-py first asks
    Redis whether the script is loaded: one more round trip per pipeline. The text costs a few hundred bytes
    and works on a Redis that lost its script cache in a restart.)"""
    pipe.eval(script.script, len(keys), *keys, *args)
