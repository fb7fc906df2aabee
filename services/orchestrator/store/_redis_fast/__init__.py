"""Every use of redis-py's (and asyncio's) private names in Trellis, in this one package: a faster client for
the orchestrator's Redis, and what its agent cache and cluster client need of redis-py's insides. Why it is worth
the risk, measured against redis-py through its public API: docs/speed-policies.md ("The Redis client").
redis-py is pinned exactly (pyproject.toml); tests/services/orchestrator/store/test_redis_internals.py fails,
naming the internal, when one of those it relies on (`internals.INTERNALS`) moves.

- `connection.py`: the connection (`Fast`: hiredis packing, writes and reads without redis-py's timers);
- `shared.py`: one connection every lean pipeline shares (auto-pipelining), its pipeline and client;
- `pool.py`: the pool (its fast path, idle connections closed) and `fast_client`, the client of them all;
- `hooks.py`: what store/agent_cache.py needs of a connection, and store/_redis_cluster.py of a cluster client;
- `internals.py`: the internals relied on, the version they were read from, and their check.

What the rest of the store calls is named here. Each redis-py class keeps redis-py's behaviour for anything
outside its fast path."""

from services.orchestrator.store._redis_fast.connection import (
    Connection,
    Fast,
    SSLConnection,
    closed_by_peer,
    fast_connection_class,
)
from services.orchestrator.store._redis_fast.hooks import KeptCommands, fast_cluster, fileno, on_invalidation, unread
from services.orchestrator.store._redis_fast.internals import INTERNALS, PINNED_REDIS, missing_internals
from services.orchestrator.store._redis_fast.pool import IDLE_CLOSE_S, Pool, fast_client
from services.orchestrator.store._redis_fast.shared import NotRetried, Pipeline, Redis, SharedConnection

__all__ = [
    "Connection", "Fast", "SSLConnection", "closed_by_peer", "fast_connection_class",
    "KeptCommands", "fast_cluster", "fileno", "on_invalidation", "unread",
    "INTERNALS", "PINNED_REDIS", "missing_internals",
    "IDLE_CLOSE_S", "Pool", "fast_client",
    "NotRetried", "Pipeline", "Redis", "SharedConnection",
]
