"""The orchestrator's Redis Cluster client: redis-py's `RedisCluster`, with its pipelines made fit for the store.

- MULTI/EXEC (a pipeline with `transaction=True`, WATCH or not): redis-py 8.1's cluster transaction runs every
  command queued on it in a thread of its own, with an event loop of its own, and in WATCH mode its EXISTS and
  DEL are never sent (it returns the pipeline, unawaited). Every transaction Trellis makes touches the keys of
  one slot (store/keys.py), so here it is redis-py's pipeline for one Redis (`SlotTransaction`), sent to the
  primary serving that slot. When the slot has moved (MOVED), or the primary went away (a failover), the
  cluster client is sent a read of the key, which it follows and so learns where the slot is now; a
  transaction that watched keys then fails with WatchError (its caller reads and tries again, as after any
  change of a watched key), one that did not is sent again there. While the slot moves (ASK, TRYAGAIN) it is
  sent again after the retry rule's backoff, until the slot has moved.
- EVALSHA in a pipeline: redis-py's cluster pipeline refuses it (a node may not have the script loaded); the
  journal, its one user, loads the script again when a node answers NOSCRIPT (store/journal.py).
- Pub/sub: redis-py's subscriber picks its node from the client's map of the slots, an empty map if the client
  has made none yet (KeyError), a stale one after a failover: the map is made, or made again, first.
- Its connections are `_redis_fast`'s (its write path loses no cancellation; it is faster too).
- Its table of commands is read once (`_redis_fast.KeptCommands`): redis-py reads it again from the first
  primary with every refresh of its map of the slots, so while that primary is down (killed, before its replica
  is elected) every command of the client failed, the healthy nodes' included.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, ClusterPubSub, RedisCluster
from redis.asyncio.retry import Retry
from redis.commands import AsyncCoreCommands
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisError, TryAgainError, WatchError

from services.orchestrator.store import _redis_fast

_REDIRECTED = (MovedError, AskError, TryAgainError, ClusterDownError)


class Cluster(RedisCluster):
    """redis-py's cluster client whose pipelines are this module's. `node_options`: how to connect to one node
    (credentials, TLS, timeouts, pool, retry), for the transactions' clients of each primary; `resend`: the
    retry rule a transaction is sent again by when its slot moved (redis_client.retry)."""

    def __init__(self, *, node_options: dict[str, Any], resend: Retry, **options: Any) -> None:
        super().__init__(**options)
        self.commands_parser = _redis_fast.KeptCommands()
        _redis_fast.fast_cluster(self)
        self._node_options = node_options
        self.resend = resend
        self._node_clients: dict[str, aioredis.Redis] = {}

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        if transaction:
            return SlotTransaction(self)
        return Pipeline(self)

    def pubsub(self, **kwargs: Any) -> "PubSub":
        return PubSub(self, **kwargs)

    def node_client(self, node: ClusterNode) -> aioredis.Redis:
        """A client of one node (its pool lives as long as this client)."""
        client = self._node_clients.get(node.name)
        if client is None:
            client = self._node_clients[node.name] = aioredis.Redis(
                connection_pool=aioredis.BlockingConnectionPool(host=node.host, port=node.port, **self._node_options))
        return client

    async def aclose(self) -> None:
        clients, self._node_clients = list(self._node_clients.values()), {}
        for client in clients:
            await client.aclose()
        await super().aclose()


class Pipeline(ClusterPipeline):
    """redis-py's cluster pipeline (no MULTI): its commands grouped by node, one round trip to each."""

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> "Pipeline":
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)


class PubSub(ClusterPubSub):
    """redis-py's cluster subscriber (PUBLISH reaches every node's subscribers), its node found in a map of the
    slots made first (once, or again when the client last met a failure)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        await self.cluster.initialize()
        return await super().execute_command(*args, **kwargs)


class SlotTransaction(AsyncCoreCommands):
    """A MULTI/EXEC on the primary of one slot, used as redis-py's transaction pipeline is: commands queued (or,
    between WATCH and MULTI, run at once), then `execute`; WatchError when a watched key changed."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._queued: list[tuple[tuple, dict]] = []
        self._key: Any = None  # a key of the transaction: its slot's primary runs it
        self._watching: aioredis.client.Pipeline | None = None  # that primary's pipeline, from WATCH on
        self._multi = False

    async def __aenter__(self) -> "SlotTransaction":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.reset()

    def __len__(self) -> int:
        return len(self._queued)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if self._key is None:
            self._key = _key_of(args)
        if self._watching is not None and not self._multi:  # between WATCH and MULTI: run now
            return self._now(args, options)
        self._queued.append((args, options))
        return self

    async def _now(self, args: tuple, options: dict) -> Any:
        try:
            return await self._watching.execute_command(*args, **options)
        except _REDIRECTED as exc:
            raise await self._watched_moved(exc) from exc

    async def watch(self, *names: Any) -> None:
        if self._multi:
            raise RedisError("Cannot issue a WATCH after a MULTI")
        if self._key is None:
            self._key = names[0]
        if self._watching is None:
            self._watching = self._cluster.node_client(await self._primary()).pipeline(transaction=True)
        try:
            await self._watching.watch(*names)
        except _REDIRECTED as exc:
            raise await self._watched_moved(exc) from exc

    def multi(self) -> None:
        if self._multi:
            raise RedisError("Cannot issue nested calls to MULTI")
        if self._queued:
            raise RedisError("Commands without an initial WATCH have already been issued")
        self._multi = True

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            if self._watching is None:
                return await self._send(raise_on_error) if self._queued else []
            pipe = self._watching
            pipe.multi()
            for args, options in self._queued:
                pipe.execute_command(*args, **options)
            try:
                return await pipe.execute(raise_on_error)
            except _REDIRECTED as exc:
                raise await self._watched_moved(exc) from exc
        finally:
            await self.reset()

    async def _send(self, raise_on_error: bool) -> list[Any]:
        """The queued commands in MULTI/EXEC on the slot's primary; nothing was read before, so a transaction
        that met a moved slot or a lost primary is sent again (the retry rule's attempts and backoff)."""
        async def attempt() -> list[Any]:
            pipe = self._cluster.node_client(await self._primary()).pipeline(transaction=True)
            for args, options in self._queued:
                pipe.execute_command(*args, **options)
            return await pipe.execute(raise_on_error)

        async def moved(error: BaseException) -> None:
            await self._learn_slot()

        return await self._cluster.resend.call_with_retry(attempt, moved)

    async def _watched_moved(self, error: BaseException) -> WatchError:
        """The slot moved while keys were watched: what was read may be stale, the caller starts again."""
        await self._learn_slot()
        return WatchError(f"the watched keys' slot moved in the cluster ({error})")

    async def _learn_slot(self) -> None:
        try:
            await self._cluster.exists(self._key)  # the cluster client follows MOVED, and keeps where it led
        except RedisError:
            pass  # the cluster is still failing over: the next attempt asks again

    async def _primary(self) -> ClusterNode:
        if self._key is None:
            raise RedisError("a Redis Cluster transaction needs a key to find its node")
        await self._cluster.initialize()
        return self._cluster.get_node_from_key(self._key)

    async def reset(self) -> None:
        watching, self._watching = self._watching, None
        if watching is not None:
            await watching.reset()  # UNWATCH, and the connection back to its pool
        self._queued = []
        self._key = None
        self._multi = False


def _key_of(args: tuple) -> Any:
    """The first key of a command: after EVAL's script and key count, else its first argument."""
    if str(args[0]).upper() in ("EVAL", "EVALSHA"):
        return args[3] if int(args[2]) > 0 else None
    return args[1] if len(args) > 1 else None
