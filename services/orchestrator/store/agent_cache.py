"""What agents resolve to (the latest published version's DSL, a named version's, the draft's), kept in the
process and dropped as soon as Redis says the agent changed: Redis's server-assisted client-side caching
(CLIENT TRACKING in broadcasting mode, https://redis.io/docs/latest/develop/reference/client-side-caching/).

A new session's run then needs no round trip to learn what it runs. Every write that changes what an agent
resolves to (an edit of its draft, a publish, a deleted version, the agent deleted), by whichever replica,
increments the agent's change counter in the same transaction (`keys.agent_changes`), so Redis pushes that
key's name to every tracking replica, which drops the entries filed under it. Only those counters are tracked
(their own prefix): the sessions, runs and indexes every run writes reach no replica.

Why a cached answer is never stale:
- One connection enables tracking and receives the invalidations (RESP3 push messages). If it dies,
  tracking dies with it, and the cache is emptied and unused until a new connection tracks again. A
  connection that goes silent is found by a PING after `_QUIET_S` without traffic.
- A hit is trusted only when nothing is waiting on that connection: an invalidation that reached this
  process but is not handled yet turns the hit into a read from Redis.
- An answer read from Redis is kept only if no invalidation came between the read's start and its reply
  (`token`): the key may have changed after the read.
Without tracking (a Redis before 6.0, a proxy that refuses it) nothing is cached and every run reads Redis.
Tracking covers the keys of the Redis this connection reaches: the orchestrator's one Redis (redis_client.py).
A client of a multi-node Redis Cluster would need a tracking connection per node.
"""

from __future__ import annotations

import asyncio
import logging
import select
from typing import Any, Hashable

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from services.orchestrator.store import _redis_fast
from services.orchestrator.store.keys import AGENT_CHANGES_PREFIX

log = logging.getLogger(__name__)

_QUIET_S = 1.0  # without a message for this long, a PING; without its answer for as long again, reconnect
_RETRY_S = 0.5
_MAX_ENTRIES = 512  # as many as compiled plans are kept (canvases.py): the DSL texts are shared with them


class ResolvedAgents:
    """Entries by caller-chosen key, each filed under the Redis key whose change drops it."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._entries: dict[Hashable, tuple[bytes, Any]] = {}  # key -> (the Redis key it is filed under, value)
        self._by_redis_key: dict[bytes, set[Hashable]] = {}
        self._generation = 0  # one more for every invalidation and every change of connection
        self._conn: Any = None  # the tracking connection, while tracking
        self._poll: Any = None  # whether that connection's socket has bytes waiting
        self._task: asyncio.Task | None = None
        self._settled = asyncio.Event()  # tracking, or refused: start() waits for either

    @property
    def tracking(self) -> bool:
        return self._conn is not None

    async def start(self, wait_s: float = 10) -> None:
        """Track from now on; returns once tracking (or after `wait_s`: runs read Redis meanwhile)."""
        self._task = asyncio.create_task(self._track(), name="agent-cache-tracking")
        try:
            await asyncio.wait_for(self._settled.wait(), wait_s)
        except TimeoutError:
            log.warning("agent cache: not tracking yet; runs read their agent from Redis until it is")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # ------------------------------------------------------------------ entries
    def get(self, key: Hashable) -> Any:
        """The entry, or None: none kept, not tracking, or an invalidation waits to be handled."""
        if not self._entries or self._unread():
            return None
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def token(self) -> int | None:
        """Taken before reading what `put` is to keep; None: not tracking, keep nothing."""
        return self._generation if self._conn is not None else None

    def put(self, token: int | None, redis_key: str, key: Hashable, value: Any) -> None:
        """Keep `value` under `key` until `redis_key` changes, if nothing was invalidated since `token`. When
        full, the entry kept longest goes."""
        if token is None or token != self._generation or self._conn is None:
            return
        name = redis_key.encode()
        if key not in self._entries and len(self._entries) >= _MAX_ENTRIES:
            oldest, (oldest_name, _) = next(iter(self._entries.items()))
            self._drop(oldest, oldest_name)
        self._entries[key] = (name, value)
        self._by_redis_key.setdefault(name, set()).add(key)

    def _drop(self, key: Hashable, name: bytes) -> None:
        self._entries.pop(key, None)
        keys = self._by_redis_key.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_redis_key[name]

    def _clear(self) -> None:
        self._entries.clear()
        self._by_redis_key.clear()
        self._generation += 1

    def _invalidate(self, redis_keys: list[bytes] | None) -> None:
        self._generation += 1
        if redis_keys is None:  # FLUSHDB, FLUSHALL
            self._clear()
            return
        for name in redis_keys:
            for key in self._by_redis_key.pop(name, ()):
                self._entries.pop(key, None)

    def _unread(self) -> bool:
        """Whether the tracking connection has bytes this process has not handled (or is gone)."""
        conn = self._conn
        if conn is None or _redis_fast.unread(conn):
            return True
        return bool(self._poll.poll(0))  # poll, not select: a busy process's descriptors pass 1024

    # ------------------------------------------------------------------ the tracking connection
    async def _track(self) -> None:
        pool = self.redis.connection_pool
        while True:
            # RESP3: the invalidations arrive on the tracking connection itself, as push messages.
            conn = pool.connection_class(**{**pool.connection_kwargs, "protocol": 3})
            try:
                await conn.connect()
                _redis_fast.on_invalidation(conn, self._on_invalidation)
                await conn.send_command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", AGENT_CHANGES_PREFIX)
                await conn.read_response()
                self._poll = select.poll()
                self._poll.register(_redis_fast.fileno(conn), select.POLLIN)
                self._clear()
                self._conn = conn
                self._settled.set()
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:  # this Redis cannot track: no cache
                log.warning("agent cache off: Redis refused client tracking (%s); runs read their agent from Redis",
                            exc)
                self._settled.set()
                return
            except Exception as exc:
                log.warning("agent cache: tracking connection lost (%s); reconnecting", exc)
            finally:
                self._conn = None
                self._clear()
                await conn.disconnect(nowait=True)
            await asyncio.sleep(_RETRY_S)

    async def _listen(self, conn: Any) -> None:
        """Invalidations are handled as they are read (`_on_invalidation`); a quiet connection is PINGed."""
        pinged = False
        while True:
            reply = await conn.read_response(timeout=_QUIET_S, push_request=True)
            if reply is not None:
                pinged = False
                continue
            if pinged:
                raise ConnectionError(f"no answer to a PING in {_QUIET_S} s")
            await conn.send_command("PING")
            pinged = True

    async def _on_invalidation(self, push: list) -> bool:
        self._invalidate(push[1])  # ["invalidate", [key, ...]], or None for every key (FLUSHDB, FLUSHALL)
        return True
