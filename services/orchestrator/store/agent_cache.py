"""What agents resolve to (the latest published version's DSL, a named version's, the draft's), kept in the
process and dropped as soon as Redis says the agent changed: Redis's server-assisted client-side caching
(CLIENT TRACKING in broadcasting mode, https://redis.io/docs/latest/develop/reference/client-side-caching/).

A new session's run then needs no round trip to learn what it runs. Every write that changes what an agent
resolves to (an edit of its draft, a publish, a deleted version, the agent deleted), by whichever replica,
increments the agent's change counter in the same transaction (`keys.agent_changes`), so Redis pushes that
key's name to every tracking replica, which drops the entries filed under it. Only those counters are tracked
(their own prefix): the sessions, runs and indexes every run writes reach no replica.

Why a cached answer is never stale:
- A connection to each node of the Redis (the one Redis; each primary and replica of a Redis Cluster; the
  primary and replicas the Sentinels name: `_nodes`) enables tracking and receives the invalidations of the
  keys changed there (RESP3 push messages): a write by a client, or, on a replica, the write it replicates.
  So a replica promoted in a failover was tracked before it took its first write (a write on a node is
  invalidated before that node answers it: tracking only the primary, its replica's invalidations would come
  after the write was answered, once replicated, or never if that replica had just been promoted), and a key
  MIGRATE moves to another node is invalidated as it leaves. If a tracking
  connection dies, the cache is emptied; a connection that goes silent is found by a PING after `_QUIET_S`
  without traffic.
- A hit is trusted only when nothing is waiting on any tracking connection: an invalidation that reached this
  process but is not handled yet turns the hit into a read from Redis.
- An answer read from Redis is kept only if every node the client reads from is tracked, and no invalidation
  and no new tracking connection came between the read's start and its reply (`token`): the key may have
  changed after the read, or on a node not tracked yet (a cluster's client learns of a node as a MOVED or
  ASK sends it there, or after a failover; the nodes are looked at again every `_QUIET_S`).
Without tracking (a Redis before 6.0, a proxy that refuses it) nothing is cached and every run reads Redis.
"""

from __future__ import annotations

import asyncio
import logging
import select
from typing import Any, Callable, Hashable

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ResponseError

from services.orchestrator.store import _redis_fast
from services.orchestrator.store.keys import AGENT_CHANGES_PREFIX

log = logging.getLogger(__name__)

_QUIET_S = 1.0  # without a message for this long, a PING; without its answer for as long again, reconnect
_RETRY_S = 0.5
_MAX_ENTRIES = 512  # as many as compiled plans are kept (canvases.py): the DSL texts are shared with them


class ResolvedAgents:
    """Entries by caller-chosen key, each filed under the Redis key whose change drops it."""

    def __init__(self, redis: aioredis.Redis | RedisCluster) -> None:
        self.redis = redis
        self._entries: dict[Hashable, tuple[bytes, Any]] = {}  # key -> (the Redis key it is filed under, value)
        self._by_redis_key: dict[bytes, set[Hashable]] = {}
        self._generation = 0  # one more for every invalidation and every change of tracking connections
        self._conns: dict[str, Any] = {}  # node name -> its tracking connection, while tracking
        self._trackers: dict[str, asyncio.Task] = {}  # node name -> the task keeping its connection
        self._poll = select.poll()  # whether a tracking connection's socket has bytes waiting
        self._task: asyncio.Task | None = None
        self._settled = asyncio.Event()  # tracking, or refused: start() waits for either
        self._refused = False
        self._known: set[str] = set()  # the nodes found by the last look (`_nodes`)

    @property
    def tracking(self) -> bool:
        """Whether every node the client reads from, or may after a failover, is tracked (answers read now may be
        kept)."""
        if self._refused or not self._conns:
            return False
        nodes = (_node_names(self.redis) or set()) | self._known
        return bool(nodes) and nodes <= self._conns.keys()

    @property
    def connections(self) -> list[Any]:
        """The tracking connections, one per node tracked."""
        return list(self._conns.values())

    async def start(self, wait_s: float = 10) -> None:
        """Track from now on; returns once tracking (or after `wait_s`: runs read Redis meanwhile)."""
        self._task = asyncio.create_task(self._watch_nodes(), name="agent-cache-nodes")
        try:
            await asyncio.wait_for(self._settled.wait(), wait_s)
        except TimeoutError:
            log.warning("agent cache: not tracking yet; runs read their agent from Redis until it is")

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._trackers.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._trackers.clear()

    # ------------------------------------------------------------------ entries
    def get(self, key: Hashable) -> Any:
        """The entry, or None: none kept, not tracking, or an invalidation waits to be handled."""
        if not self._entries or self._unread():
            return None
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def token(self) -> int | None:
        """Taken before reading what `put` is to keep; None: not tracking, keep nothing."""
        return self._generation if self.tracking else None

    def put(self, token: int | None, redis_key: str, key: Hashable, value: Any) -> None:
        """Keep `value` under `key` until `redis_key` changes, if nothing was invalidated and no node came to be
        tracked since `token`, and every node is tracked. When full, the entry kept longest goes."""
        if token is None or token != self._generation or not self.tracking:
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
        """Whether a tracking connection has bytes this process has not handled (or is gone)."""
        if not self._conns:
            return True
        for conn in self._conns.values():
            if _redis_fast.unread(conn):
                return True
        return bool(self._poll.poll(0))  # poll, not select: a busy process's descriptors pass 1024

    # ------------------------------------------------------------------ the tracking connections
    async def _watch_nodes(self) -> None:
        """A tracker per node the client knows, started as nodes appear and stopped as they go."""
        while not self._refused:
            try:
                nodes = await _nodes(self.redis)
            except Exception as exc:  # noqa: BLE001 (a cluster that cannot be asked now: asked again)
                log.warning("agent cache: cannot list the Redis nodes to track (%s)", exc)
                await asyncio.sleep(_QUIET_S)
                continue
            self._known = set(nodes)
            for name in self._trackers.keys() - nodes.keys():  # gone from the cluster (failed over, removed)
                self._trackers.pop(name).cancel()
            for name, make in nodes.items():
                if name not in self._trackers:
                    self._trackers[name] = asyncio.create_task(self._track(name, make), name=f"agent-cache-{name}")
            await asyncio.sleep(_QUIET_S)

    async def _track(self, name: str, make: Callable[[], Any]) -> None:
        while True:
            # RESP3: the invalidations arrive on the tracking connection itself, as push messages.
            conn = make()
            fd = None
            try:
                await conn.connect()
                _redis_fast.on_invalidation(conn, self._on_invalidation)
                await conn.send_command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", AGENT_CHANGES_PREFIX)
                await conn.read_response()
                fd = _redis_fast.fileno(conn)
                self._poll.register(fd, select.POLLIN)
                self._conns[name] = conn
                self._generation += 1  # a read that began before this node was tracked is not kept
                if self.tracking:
                    self._settled.set()
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:  # this Redis cannot track: no cache
                log.warning("agent cache off: Redis refused client tracking (%s); runs read their agent from Redis",
                            exc)
                self._refused = True
                self._settled.set()
                return
            except Exception as exc:
                log.warning("agent cache: tracking connection to %s lost (%s); reconnecting", name or "Redis", exc)
            finally:
                if self._conns.get(name) is conn:
                    del self._conns[name]
                if fd is not None:
                    self._poll.unregister(fd)
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


async def _nodes(client: aioredis.Redis | RedisCluster) -> dict[str, Callable[[], Any]]:
    """Each node the client reads from or may after a failover, by name, with how to open a RESP3 connection to
    it: every node of a cluster (primaries and replicas, as the client knows them now); the primary and the
    replicas the Sentinels name; else the one Redis."""
    if isinstance(client, RedisCluster):
        await client.initialize()  # the client's map of the cluster (nothing once it has one)
        nodes = {node.name: _opener(node.connection_class, node.connection_kwargs) for node in client.get_nodes()}
        # and every node the cluster knows: its map leaves out replicas CLUSTER SLOTS does not list (Redis 7
        # lists a replica only once it has replicated something), and nodes it has not been sent to yet
        template = client.get_nodes()[0]
        for address, node in (await client.cluster_nodes()).items():
            host, _, port = address.rpartition(":")
            if host and address not in nodes and not {"fail", "handshake", "noaddr"} & set(node["flags"].split(",")):
                nodes[address] = _opener(template.connection_class,
                                         {**template.connection_kwargs, "host": host, "port": int(port)})
        return nodes
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        sentinels = pool.sentinel_manager
        addresses = [await sentinels.discover_master(pool.service_name),
                     *await sentinels.discover_slaves(pool.service_name)]
        plain = SSLConnection if issubclass(pool.connection_class, SSLConnection) else aioredis.Connection
        kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "connection_pool"}
        return {f"{host}:{port}": _opener(plain, {**kwargs, "host": host, "port": port}) for host, port in addresses}
    return {"": _opener(pool.connection_class, pool.connection_kwargs)}


def _node_names(client: aioredis.Redis | RedisCluster) -> set[str] | None:
    """The nodes the client knows now, if it keeps a map of them (a cluster's: it may have learnt of one since the
    last look); else None (the last look's are all there is)."""
    if isinstance(client, RedisCluster):
        return {node.name for node in client.get_nodes()}
    return None


def _opener(connection_class: type, kwargs: dict[str, Any]) -> Callable[[], Any]:
    return lambda: connection_class(**{**kwargs, "protocol": 3})
