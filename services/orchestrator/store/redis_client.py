"""The orchestrator's Redis client: one Redis, a Redis Cluster or the primary Sentinel names, plain or over TLS
(what `TRELLIS_REDIS_URL` says: redis_target.py, docs/redis.md); its pool and timeouts, its one retry rule, and
readiness (health stays NOT_SERVING until Redis answers).

Each is redis-py's own client: `Redis` for one Redis, with a faster connection, pipeline and pool over plain
TCP (`_redis_fast.fast_client`: the one module that uses redis-py's internals; docs/speed-policies.md says what
it buys); `RedisCluster` for a cluster (it follows MOVED and ASK and refreshes its map of the slots when they
move or a primary fails over); the client Sentinel hands out for its primary (it asks the Sentinels again when
its primary stops answering or turns replica).

Retries: one rule for every Redis call, redis-py's own `Retry` (`retry`), set once on the client here. A call
that meets a lost connection (refused, reset, closed: a restart, a failover) reconnects and is sent again, up
to `RETRIES` times with jittered exponential backoff; a pipeline is sent again whole, as redis-py does. A
timeout is not retried (the command may still be running, and a stalled Redis would hold its caller that many
times longer). A write whose reply was lost (Redis ran it, then the connection broke) runs again when it is
resent: the journal checks its batches instead (store/journal.py); for the other writes (a turn's messages,
a tool-call log entry, a run's attempt counter) that narrow window is the accepted cost (docs/durability.md).
"""

from __future__ import annotations

import asyncio

from limits.aio.storage import RedisClusterStorage, RedisSentinelStorage, RedisStorage, Storage
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster, Sentinel
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import SSLConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedConnection
from redis.backoff import ConstantBackoff, EqualJitterBackoff
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeout

from services.common.errors import Unavailable
from services.orchestrator.store import _redis_cluster, _redis_fast, redis_target
from services.orchestrator.store.redis_target import RedisTarget

# redis-py's default pool refuses its 101st connection at once ("Too many connections"): a burst of runs (each
# holds one for a command, its journal writer another) failed runs. This pool makes a caller wait for a free
# connection instead, for at most POOL_TIMEOUT_S.
MAX_CONNECTIONS = 256
POOL_TIMEOUT_S = 30
# A Redis that stops answering (stalled, or cut off without a reset) fails each call after this long instead of
# holding it, and every run behind it, for ever; the URL's `socket_timeout` and `socket_connect_timeout` win.
# Longer than any blocking read the orchestrator makes (its XREAD waits 1 s).
SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
# The retry rule (module docstring): a few attempts soon after a lost connection; a Redis away for longer is
# the caller's to report (UNAVAILABLE), or the journal's to wait for (its `retry_s`).
RETRIES = 3
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 2.0


def backoff() -> EqualJitterBackoff:
    """The wait before each new attempt: doubling from BACKOFF_BASE_S up to BACKOFF_CAP_S, half of it random
    (replicas that lost Redis together do not reconnect together)."""
    return EqualJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S)


def retry(retries: int | None = None, errors: tuple[type[Exception], ...] = (RedisConnectionError,)) -> Retry:
    """The Redis retry rule: `RETRIES` attempts after the first (-1: until the caller stops), on `errors`."""
    return Retry(backoff(), RETRIES if retries is None else retries, errors)


def connect(target: RedisTarget | str) -> Redis | RedisCluster:
    """The process's client of `target` (a parsed TRELLIS_REDIS_URL, or the URL); lazy: nothing connects until
    it is first used."""
    if isinstance(target, str):
        target = redis_target.parse(target)
    if target.kind == redis_target.CLUSTER:
        return _cluster(target)
    if target.kind == redis_target.SENTINEL:
        return _sentinel(target)
    return _redis_fast.fast_client(target.url, retry(), max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S,
                                   socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                   **target.options)


def _cluster(target: RedisTarget) -> RedisCluster:
    """redis-py's cluster client (with pipelines fit for the store: _redis_cluster.py). Its retry differs from
    the rule above in one way, its own: after a lost connection it asks the cluster for its slots again and
    resends at once (RETRIES times), rather than after a backoff. Each node has a pool of up to
    MAX_CONNECTIONS; a caller past them fails at once (MaxConnectionsError) rather than waits. A MULTI/EXEC
    goes to its slot's primary through a client of that node alone, with this module's rule."""
    options = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S, **target.options}
    node_options = {k: v for k, v in options.items() if k != "ssl"}
    node_options.update(connection_class=_redis_fast.SSLConnection if options.get("ssl") else _redis_fast.Connection,
                        retry=retry(), max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S)
    moved = retry(errors=(RedisConnectionError, MovedError, AskError, TryAgainError, ClusterDownError))
    return _redis_cluster.Cluster(startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
                                  retry=retry(), max_connections=MAX_CONNECTIONS, node_options=node_options,
                                  resend=moved, **options)


class _SentinelConnection(_redis_fast.Fast, SentinelManagedConnection):
    """A connection to the primary the Sentinels name (made faster, losing no cancellation: `_redis_fast.Fast`).
    redis-py asks them when it opens one, but a command's retry reopens a lost connection where it was: after a
    failover, at the old primary (now a replica: each attempt refused with READONLY, then the command failed).
    Here every opening asks them."""

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)


class _SentinelSSLConnection(_SentinelConnection, SSLConnection):
    pass


class _SentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool (connections go to the primary the Sentinels name now) that, past MAX_CONNECTIONS, makes
    a caller wait for a free connection, as the single Redis's pool does."""


class _SentinelClient(Redis):
    """The primary's client; closing it also closes its connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        await self.connection_pool.sentinel_manager.aclose()


def _sentinel(target: RedisTarget) -> Redis:
    timeouts = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S}
    sentinels = Sentinel(list(target.nodes), sentinel_kwargs={**timeouts, **target.sentinel_options})
    options = {**timeouts, **target.options}
    connection = _SentinelSSLConnection if options.pop("ssl", False) else _SentinelConnection
    return sentinels.master_for(target.service, redis_class=_SentinelClient, connection_pool_class=_SentinelPool,
                                connection_class=connection, retry=retry(), max_connections=MAX_CONNECTIONS,
                                timeout=POOL_TIMEOUT_S, **options)


def limits_storage(target: RedisTarget | str, key_prefix: str) -> Storage:
    """The `limits` package's storage on the same Redis (its own client, made the way above: the same cluster,
    Sentinels or TLS), its keys under `key_prefix`."""
    if isinstance(target, str):
        target = redis_target.parse(target)
    timeouts = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S}
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in target.nodes)
    if target.kind == redis_target.CLUSTER:
        return RedisClusterStorage(f"async+redis+cluster://{hosts}", implementation="redispy",
                                   key_prefix=key_prefix, **{**timeouts, **target.options})
    if target.kind == redis_target.SENTINEL:
        sentinels = {**timeouts, "username": None, "password": None, **target.sentinel_options}
        return RedisSentinelStorage(f"async+redis+sentinel://{hosts}/{target.service}", implementation="redispy",
                                    key_prefix=key_prefix, use_replicas=False, sentinel_kwargs=sentinels,
                                    **{**timeouts, **target.options})
    scheme, _, rest = target.url.partition("://")
    return RedisStorage(f"async+{scheme.lower()}://{rest}", implementation="redispy", key_prefix=key_prefix,
                        **{**timeouts, **target.options})


async def wait_until_ready(client: Redis | RedisCluster, url: str, timeout_s: float = 10.0,
                           delay_s: float = 0.2) -> None:
    """Until Redis answers a PING, for at most `timeout_s`: a PING every `delay_s` after a failed one (each
    also retried by the client's rule)."""
    errors: list[BaseException] = []

    async def failed(error: BaseException) -> None:
        errors[:] = [error]

    try:
        async with asyncio.timeout(timeout_s):
            await Retry(ConstantBackoff(delay_s), -1, (RedisConnectionError, RedisTimeout, OSError)) \
                .call_with_retry(client.ping, failed)
    except TimeoutError as exc:
        last = errors[0] if errors else f"no answer in {timeout_s} s"
        raise Unavailable(f"Redis at {_shown(url)} is not reachable: {last}") from exc
    except (OSError, RedisError) as exc:
        raise Unavailable(f"Redis at {_shown(url)} is not reachable: {exc}") from exc


def _shown(url: str) -> str:
    return RedisTarget(redis_target.SINGLE, url).shown
