"""The pool (a fast path for a free connection, and idle connections closed), and the client made of this
package's parts (`fast_client`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from services.orchestrator.store._redis_fast.connection import closed_by_peer, fast_connection_class
from services.orchestrator.store._redis_fast.shared import Redis, SharedConnection

# A pooled connection idle this long is closed (Pool); the next burst opens what it needs again.
IDLE_CLOSE_S = 60.0


class Pool(aioredis.BlockingConnectionPool):
    """redis-py's blocking pool with a fast path for its common case, a free connection and nobody waiting (a
    run checks out three): handed out and taken back in place, without the pool's locks, its 30 s timer, its
    observability hooks and, on release, the task redis-py's pipelines shield it in (`release` returns a done
    future). A caller that has to wait for a connection, or a release that has to wake one, goes redis-py's way.

    And a pool that gives back what a burst made it open: a connection left idle for `idle_close_s` is taken out
    of the pool and closed (redis-py's pools never shrink, so a take-over's peak of blocking reads would keep its
    sockets open, and count against a managed Redis's connection limit, for the process's life). The pool hands
    out the most recently used first, so a steady load keeps reusing the same few and the rest go.
    """

    idle_close_s = IDLE_CLOSE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle_since: dict[Any, float] = {}  # connection -> when it was last given back
        self._trimming: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Future] = set()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if not self._available_connections:
            return await super().get_connection(*args, **kwargs)
        connection = self._available_connections.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)  # connected, and nothing left unread on it
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def ensure_connection(self, connection: Any) -> None:
        if closed_by_peer(connection):  # reset or closed while idle: reconnected here, not failed on first use
            await connection.disconnect()
        await super().ensure_connection(connection)

    def release(self, connection: Any) -> Any:  # awaitable either way
        self._idle_since[connection] = time.monotonic()
        if self._trimming is None and self.idle_close_s > 0:
            self._trimming = asyncio.get_running_loop().call_later(self.idle_close_s, self._close_idle)
        if self._condition._waiters or connection.should_reconnect():  # someone to wake, a reconnect: redis-py's
            return asyncio.ensure_future(super().release(connection))
        self._in_use_connections.remove(connection)
        self._available_connections.append(connection)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if self._trimming is not None:
            self._trimming.cancel()
            self._trimming = None
        await asyncio.gather(*self._closing)
        await super().disconnect(inuse_connections)

    def _close_idle(self) -> None:
        """Out of the pool first, so that no caller takes one while it closes; the pool opens new ones when it
        needs them again."""
        self._trimming = None
        now = time.monotonic()
        kept = []
        for connection in self._available_connections:
            if now - self._idle_since.get(connection, now) < self.idle_close_s:
                kept.append(connection)
                continue
            self._idle_since.pop(connection, None)
            closing = asyncio.ensure_future(_close_quietly(connection))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        self._available_connections[:] = kept
        if kept:
            oldest = min(self._idle_since.get(connection, now) for connection in kept)
            self._trimming = asyncio.get_running_loop().call_later(
                max(0.0, oldest + self.idle_close_s - now), self._close_idle)


async def _close_quietly(connection: Any) -> None:
    """An idle connection's close: whatever goes wrong closing it (a peer gone already), it is closed."""
    try:
        await connection.disconnect()
    except (RedisConnectionError, RedisTimeout, OSError):
        pass


def fast_client(url: str, retry: Retry, **pool_options: Any) -> aioredis.Redis:
    """A client of `url` (lazy: nothing connects until it is first used), its pool's connections made with
    `pool_options` and `retry`: this module's connection and pool; over TCP its pipelines too (TLS and unix
    sockets keep redis-py's)."""
    pool = Pool.from_url(url, retry=retry, **pool_options)
    client = Redis(connection_pool=pool)
    tcp = pool.connection_class is aioredis.Connection
    pool.connection_class = fast_connection_class(pool.connection_class)
    if tcp:
        client.shared = SharedConnection(pool, retry)
    return client
