"""The orchestrator's Redis client on a real Redis Cluster (three primaries, a replica each), for what runs do not
show (test_redis_cluster_faults.py has the runs): MULTI/EXEC with WATCH on the primary of its slot, also after
the slot moved; the agent cache tracking every node, so a change made on a replica just promoted still reaches
it; cancels published through any node reaching a listener on another; the `limits` package's windows."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter
from redis.crc import key_slot

from services.common.errors import NotFound
from services.orchestrator.store import AgentStore, SessionStore, keys
from services.orchestrator.store.redis_client import connect, limits_storage
from services.orchestrator.store.cancels import CancelListener
from services.orchestrator.store.sessions import message
from tests.services.orchestrator.store.test_redis_client import tasks_cancelled_while_writing
from tests.support.redis_cluster import RedisClusterServers
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    cluster = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def client(redis_cluster):
    client = connect(redis_cluster.url)
    yield client
    await client.aclose()


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


def another_primary(cluster: RedisClusterServers, slot: int):
    owner = cluster.primary_of_slot(slot)
    return next(p for p in cluster.primaries() if p is not owner)


async def test_a_watched_write_sees_that_its_record_was_deleted(client, tenant):
    sessions = SessionStore(client, 3600)
    created = await sessions.create(tenant, agent_id="a1", messages=[message("assistant", "Hi!")])
    await sessions.set_paused_run(tenant, created.id, "run-1")  # WATCH, EXISTS, MULTI/EXEC on its primary
    assert (await sessions.get(tenant, created.id)).paused_run == "run-1"
    await sessions.delete(tenant, created.id)
    with pytest.raises(NotFound, match="not found"):  # (redis-py's cluster transaction never sent the EXISTS)
        await sessions.set_paused_run(tenant, created.id, "run-2")
    assert not await client.exists(keys.session(tenant, created.id))  # not brought back


async def test_transactions_follow_their_slot_to_another_primary(redis_cluster, client, tenant):
    agents = AgentStore(client)
    a = await agents.create(tenant, title="moving", dsl_json='{"v": 1}')  # MULTI/EXEC on the tenant's primary
    slot = key_slot(keys.agent(tenant, a.id).encode())
    await asyncio.to_thread(redis_cluster.migrate_slot, slot, another_primary(redis_cluster, slot))
    # The client still thinks the slot is where it was: MOVED, then the same writes on its new primary.
    await agents.update(tenant, a.id, dsl_json='{"v": 2}')  # watched: WatchError, read again, written there
    assert (await agents.get(tenant, a.id)).dsl_json == '{"v": 2}'
    await asyncio.to_thread(redis_cluster.migrate_slot, slot, another_primary(redis_cluster, slot))
    b = await agents.create(tenant, title="second", dsl_json='{"v": 3}')  # not watched: sent again there
    assert [x.id for x in (await agents.list(tenant))[0]] == [b.id, a.id]
    assert redis_cluster.primary_of_key(keys.agent(tenant, a.id)).client.hget(
        keys.agent(tenant, a.id), "dsl_json") == b'{"v": 2}'


async def test_the_agent_cache_tracks_every_node_and_a_replica_promoted_keeps_it_right(redis_cluster, client, tenant):
    tracked = AgentStore(client)
    cache = tracked.resolved_cache
    await cache.start()
    other_client = connect(redis_cluster.url)  # another replica of the orchestrator
    try:
        assert cache.tracking and len(cache.connections) == len(redis_cluster.nodes)
        other = AgentStore(other_client)
        a = await other.create(tenant, title="cached", dsl_json='{"v": 1}')
        assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == '{"v": 1}'
        assert cache.get((tenant, a.id, ":draft")) is not None  # kept
        primary = redis_cluster.primary_of_key(keys.agent_changes(tenant, a.id))
        await asyncio.to_thread(redis_cluster.failover, redis_cluster.replica_of(primary))
        for n in range(2, 6):  # written on the promoted replica, asked for right after
            await other.update(tenant, a.id, dsl_json=f'{{"v": {n}}}')
            assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == f'{{"v": {n}}}'
        await eventually(lambda: kept(tracked, tenant, a.id), what="the agent kept again: the cache is on")

        # A primary killed: its tracking connection dies and the cache is emptied, and off until the client knows
        # the cluster without it; then kept again, and right.
        primary = redis_cluster.primary_of_key(keys.agent_changes(tenant, a.id))
        replica = await asyncio.to_thread(redis_cluster.kill_primary, primary)
        await eventually(lambda: cache.get((tenant, a.id, ":draft")) is None, what="the cache emptied")
        await other.update(tenant, a.id, dsl_json='{"v": 6}')  # (the writer's client learns the new primary)

        await eventually(lambda: kept(tracked, tenant, a.id, '{"v": 6}'), what="the cache on again", timeout=30,
                         ignoring=(redis.ConnectionError,))
        await other.update(tenant, a.id, dsl_json='{"v": 7}')
        assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == '{"v": 7}'
        assert replica.role() == "master"
        await asyncio.to_thread(redis_cluster.restart, primary)
    finally:
        await cache.aclose()
        await other_client.aclose()


async def kept(agents: AgentStore, tenant: str, agent_id: str, dsl: str | None = None) -> bool:
    """Whether the agent's draft, resolved (right: `dsl`), is kept afterwards (a resolve whose read an
    invalidation crossed keeps nothing: the next one does)."""
    resolved = await agents.resolve_dsl(tenant, agent_id, draft=True)
    assert dsl is None or resolved[0] == dsl
    return agents.resolved_cache.get((tenant, agent_id, ":draft")) is not None


async def test_a_cancel_published_through_any_node_reaches_the_listener(redis_cluster, client):
    got: list[str] = []
    listener = CancelListener(client, got.append)
    await listener.start()
    try:
        for i, node in enumerate(redis_cluster.nodes):  # PUBLISH on a cluster reaches every node's subscribers
            node.client.publish(keys.CANCEL_CHANNEL, f"run-{i}")
        await client.publish(keys.CANCEL_CHANNEL, "run-x")  # as RunStore.request_cancel sends it
        expected = sorted([*(f"run-{i}" for i in range(len(redis_cluster.nodes))), "run-x"])
        await eventually(lambda: sorted(got) == expected, what="every cancel heard")
    finally:
        await listener.stop()


async def test_the_limits_windows_on_a_cluster(redis_cluster, tenant):
    limiter = MovingWindowRateLimiter(limits_storage(redis_cluster.url, "trellis:test_limits"))
    item = RateLimitItemPerSecond(2, 60)
    assert [await limiter.hit(item, tenant) for _ in range(3)] == [True, True, False]


async def test_a_task_cancelled_while_it_writes_to_the_cluster_is_cancelled(client):
    """(redis-py's own cluster connection lost such cancellations: a shutdown waited for ever for a task that had
    been told to stop: test_redis_client.py)"""
    assert await tasks_cancelled_while_writing(client) == 0
