"""The orchestrator's Redis connection: its pool and timeouts, its one retry rule, and readiness (health stays
NOT_SERVING until Redis answers).

The client is redis-py's, with a faster connection, pipeline and pool over TCP (`_redis_fast.fast_client`:
the one module that uses redis-py's internals; docs/speed-policies.md says what it buys).

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

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff, EqualJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeout

from services.common.errors import Unavailable
from services.orchestrator.store import _redis_fast

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


def connect(url: str) -> Redis:
    """The process's client (lazy: nothing connects until it is first used)."""
    return _redis_fast.fast_client(url, retry(), max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S,
                                   socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S)


async def wait_until_ready(client: Redis, url: str, timeout_s: float = 10.0, delay_s: float = 0.2) -> None:
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
        raise Unavailable(f"Redis at {url} is not reachable: {last}") from exc
    except (OSError, RedisError) as exc:
        raise Unavailable(f"Redis at {url} is not reachable: {exc}") from exc
