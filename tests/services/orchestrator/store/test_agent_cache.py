"""The agent resolution cache (store/agent_cache.py) against a real Redis: a kept agent costs no round trip, and
whatever any replica changes is what the next run gets, with no wait, also across a lost tracking connection."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from services.common.errors import NotFound
from services.orchestrator.store import AgentStore, SessionStore, agent_cache, keys
from services.orchestrator.store.redis_client import connect
from services.orchestrator.store.sessions import message
from tests.support.redis_round_trips import count_round_trips
from tests.support.redis_server import RedisServer


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def tracked(redis_client):
    agents = AgentStore(redis_client)
    await agents.resolved_cache.start()
    assert agents.resolved_cache.tracking
    yield agents
    await agents.resolved_cache.aclose()


@pytest.fixture
def sends(monkeypatch, tracked):
    """Commands the orchestrator's connections send (one per round trip), the tracking connection's aside."""
    return count_round_trips(monkeypatch, skip=lambda conn: conn in tracked.resolved_cache.connections)


async def until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {what}")


async def test_a_kept_agent_is_resolved_without_a_round_trip(tracked, sends, tenant):
    a = await tracked.create(tenant, title="K", dsl_json='{"v": 1}')
    v1 = await tracked.publish(tenant, a.id)
    await tracked.update(tenant, a.id, dsl_json='{"v": 2}')
    for how, expected in (({}, ('{"v": 1}', v1.id)), ({"draft": True}, ('{"v": 2}', "")),
                          ({"version_id": v1.id}, ('{"v": 1}', v1.id))):
        assert await tracked.resolve_dsl(tenant, a.id, **how) == expected  # read once
        sends.clear()
        assert await tracked.resolve_dsl(tenant, a.id, **how) == expected
        assert sends == [], how
    assert tracked.cached_dsl(tenant, a.id, v1.id) == ('{"v": 1}', v1.id)  # what a session's next turn finds
    assert tracked.cached_dsl(tenant, a.id, "") == ('{"v": 2}', "")


async def test_what_another_replica_changes_is_what_the_next_run_gets(tracked, redis_client, tenant):
    other = AgentStore(redis_client)  # another replica, tracking or not
    a = await other.create(tenant, title="X", dsl_json='{"v": 0}')
    for n in range(1, 31):  # each answer asked for right after the change: no wait for the invalidation
        assert (await tracked.resolve_dsl(tenant, a.id))[0] == f'{{"v": {n - 1}}}'
        await other.update(tenant, a.id, dsl_json=f'{{"v": {n}}}')
        assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == f'{{"v": {n}}}'
        version = await other.publish(tenant, a.id)
        assert await tracked.resolve_dsl(tenant, a.id) == (f'{{"v": {n}}}', version.id)
    await other.delete_version(tenant, a.id, version.id)
    assert (await tracked.resolve_dsl(tenant, a.id))[1] != version.id
    with pytest.raises(NotFound):
        await tracked.resolve_dsl(tenant, a.id, version_id=version.id)
    await other.delete(tenant, a.id)
    for how in ({}, {"draft": True}):
        with pytest.raises(NotFound, match=f"agent '{a.id}' not found"):
            await tracked.resolve_dsl(tenant, a.id, **how)


async def test_an_invalidation_not_handled_yet_turns_a_hit_into_a_read(tracked, redis_server, tenant):
    a = await tracked.create(tenant, title="U", dsl_json='{"v": 1}')
    assert await tracked.resolve_dsl(tenant, a.id, draft=True) == ('{"v": 1}', "")
    with redis.Redis.from_url(redis_server.url) as blocking:  # this process's event loop does not run meanwhile
        with blocking.pipeline(transaction=True) as pipe:  # as another replica's AgentStore.update writes it
            pipe.hset(keys.agent(tenant, a.id), "dsl_json", '{"v": 2}')
            pipe.incr(keys.agent_changes(tenant, a.id))
            pipe.execute()
        blocking.ping()  # answered after Redis has sent the invalidation of the write before it
    assert await tracked.resolve_dsl(tenant, a.id, draft=True) == ('{"v": 2}', "")


async def test_what_runs_write_reaches_no_tracking_replica(tracked, redis_client, sends, tenant):
    a = await tracked.create(tenant, title="W", dsl_json='{"v": 1}')
    assert await tracked.resolve_dsl(tenant, a.id) == ('{"v": 1}', "")
    cache = tracked.resolved_cache
    generation = cache._generation
    sessions = SessionStore(redis_client, 3600)
    for _ in range(20):  # a run's session and its indexes under the agent (`t:{tenant}:agent:<id>:...`)
        await sessions.create(tenant, agent_id=a.id, user_id="u", messages=[message("assistant", "Hi!")])
    await redis_client.ping()  # any invalidation would have been sent before this answer
    await asyncio.sleep(0.05)
    assert cache._generation == generation  # no invalidation came
    sends.clear()
    assert await tracked.resolve_dsl(tenant, a.id) == ('{"v": 1}', "")
    assert sends == []


async def test_a_lost_tracking_connection_empties_the_cache_until_it_tracks_again(tracked, redis_client, sends,
                                                                                  tenant):
    other = AgentStore(redis_client)
    a = await other.create(tenant, title="L", dsl_json='{"v": 1}')
    v1 = await other.publish(tenant, a.id)
    assert await tracked.resolve_dsl(tenant, a.id) == ('{"v": 1}', v1.id)
    cache = tracked.resolved_cache
    lost = cache.connections[0]
    for line in (await redis_client.execute_command("CLIENT", "LIST")).splitlines():
        fields = dict(f.split("=", 1) for f in (line.decode() if isinstance(line, bytes) else line).split())
        if "t" in fields["flags"]:  # a tracking connection
            await redis_client.execute_command("CLIENT", "KILL", "ID", fields["id"])
    await other.update(tenant, a.id, dsl_json='{"v": 2}')
    v2 = await other.publish(tenant, a.id)  # while nobody tracks: no invalidation reaches this replica
    assert await tracked.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)
    await until(lambda: cache.tracking and lost not in cache.connections, "tracked again")
    assert await tracked.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)
    sends.clear()
    assert await tracked.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)
    assert sends == []


async def test_a_silent_tracking_connection_is_given_up_after_a_ping(tracked, redis_client, monkeypatch, tenant):
    monkeypatch.setattr(agent_cache, "_QUIET_S", 0.05)
    a = await tracked.create(tenant, title="S", dsl_json='{"v": 1}')
    await tracked.resolve_dsl(tenant, a.id, draft=True)
    cache = tracked.resolved_cache
    assert cache.get((tenant, a.id, ":draft")) is not None
    # Redis answers nobody for a while (not even CLIENT UNPAUSE): the tracking connection's PING goes unanswered.
    await redis_client.execute_command("CLIENT", "PAUSE", 3000, "ALL")
    await until(lambda: not cache.tracking, "gave the silent connection up")
    assert cache.get((tenant, a.id, ":draft")) is None
    await until(lambda: cache.tracking, "tracked again")


async def test_an_answer_read_across_an_invalidation_is_not_kept(tracked, tenant):
    cache = tracked.resolved_cache
    token = cache.token()  # a read starts
    cache._invalidate([b"some key"])  # any change meanwhile: the read may have seen the state before it
    cache.put(token, keys.agent(tenant, "a1"), (tenant, "a1", ":draft"), ("{}", ""))
    assert cache.get((tenant, "a1", ":draft")) is None
    cache.put(cache.token(), keys.agent(tenant, "a1"), (tenant, "a1", ":draft"), ("{}", ""))
    assert cache.get((tenant, "a1", ":draft")) == ("{}", "")


async def test_a_redis_that_refuses_tracking_leaves_the_cache_off(tmp_path, tenant):
    server = RedisServer(tmp_path, args=("--rename-command", "CLIENT", ""))  # as a proxy that has no CLIENT
    server.start()
    client = connect(server.url)
    try:
        agents = AgentStore(client)
        # Settles once refused: it does not wait for tracking that never comes (60 s here).
        await asyncio.wait_for(agents.resolved_cache.start(wait_s=60), 30)
        assert not agents.resolved_cache.tracking
        a = await agents.create(tenant, title="R", dsl_json='{"v": 1}')
        v1 = await agents.publish(tenant, a.id)
        assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 1}', v1.id)
        await agents.update(tenant, a.id, dsl_json='{"v": 2}')
        v2 = await agents.publish(tenant, a.id)
        assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)  # read from Redis each time
        await agents.resolved_cache.aclose()
    finally:
        await client.aclose()
        server.stop()


async def test_a_tracking_connection_past_descriptor_1024_still_serves_hits(redis_client, tenant):
    import os
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # a busy process: the next socket is past 1024
    try:
        for _ in range(5):  # (a descriptor another connection freed meanwhile is taken first: fill it, try again)
            agents = AgentStore(redis_client)
            await agents.resolved_cache.start()
            if agents.resolved_cache.connections[0]._writer.get_extra_info("socket").fileno() >= 1024:
                break
            await agents.resolved_cache.aclose()
            held += [os.open(os.devnull, os.O_RDONLY) for _ in range(20)]
        assert agents.resolved_cache.connections[0]._writer.get_extra_info("socket").fileno() >= 1024
        a = await agents.create(tenant, title="F", dsl_json='{"v": 1}')
        assert await agents.resolve_dsl(tenant, a.id, draft=True) == ('{"v": 1}', "")
        assert agents.resolved_cache.get((tenant, a.id, ":draft")) == ('{"v": 1}', "")
        await agents.resolved_cache.aclose()
    finally:
        for fd in held:
            os.close(fd)
