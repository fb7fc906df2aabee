"""The orchestrator on a Redis replicated under Sentinel (a primary, its replica, three Sentinels:
tests/support/redis_sentinel.py), as TRELLIS_REDIS_URL=redis+sentinel://.../trellis names it, while the primary
goes away: a dozen streaming runs through one orchestrator while the Sentinels hand the primary's place to the
replica, or after the primary was killed -9. The client asks the Sentinels for the new primary; every run ends
whole, its stream as its client saw it (the handover) or whole (the kill: runs that ended while no primary
answered are taken over and ended, as after a Redis restart). The agent cache follows the primary too."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.store import AgentStore
from services.orchestrator.store.redis_client import connect, limits_storage
from tests.services.orchestrator.store.test_redis_cluster_faults import (SCRIPTS, TEXT, answer, assert_nothing_lost,
                                                                        ended, runs_through)
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.redis_sentinel import RedisSentinelServers
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    servers = RedisSentinelServers(tmp_path_factory.mktemp("redis-sentinel"))
    servers.start()
    yield servers
    servers.stop()


@pytest.fixture
async def stub(sentinel):
    async with llm_gateway(SCRIPTS) as llm, orchestrator(sentinel.url, llm_gateway_addr=llm.addr) as orch, \
            grpc.aio.insecure_channel(orch.addr) as channel:
        yield canvas_grpc.CanvasServiceStub(channel)


async def test_the_sentinels_hand_the_primary_over_in_the_middle_of_runs(sentinel, stub, caplog):
    before = sentinel.primary()
    seen = await runs_through(stub, lambda run_ids: sentinel.failover())
    await assert_nothing_lost(stub, seen, caplog)
    assert sentinel.primary() is not before


async def test_the_primary_killed_in_the_middle_of_runs(sentinel, stub):
    killed = []

    def kill(run_ids: list[str]) -> None:
        killed.append(sentinel.primary())
        sentinel.kill_primary()

    try:
        seen = await runs_through(stub, kill)
        for events in seen:
            assert events[-1].WhichOneof("kind") == "run_finished" and events[-1].run_finished.error == ""
            run_id = events[0].run_id
            await eventually(lambda: ended(stub, run_id), what=f"the end of run {run_id}", timeout=90)
            stored = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=run_id),
                                                     timeout=60)]
            assert stored[-1].WhichOneof("kind") == "run_finished" and stored[-1].run_finished.error == ""
            assert answer(stored) == TEXT
    finally:
        for node in killed:
            await asyncio.to_thread(sentinel.restart, node)


async def test_the_agent_cache_follows_the_primary(sentinel):
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    client, other_client = connect(sentinel.url), connect(sentinel.url)
    tracked, other = AgentStore(client), AgentStore(other_client)
    await tracked.resolved_cache.start()
    try:
        a = await other.create(tenant, title="cached", dsl_json='{"v": 1}')
        assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == '{"v": 1}'
        await asyncio.to_thread(sentinel.failover)
        for n in range(2, 5):  # each change on the new primary, asked for right after: never the old answer
            await eventually(lambda: updated(other, tenant, a.id, n), what="the change written", timeout=30)
            assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == f'{{"v": {n}}}'

        async def kept() -> bool:
            await tracked.resolve_dsl(tenant, a.id, draft=True)
            return tracked.resolved_cache.get((tenant, a.id, ":draft")) is not None

        await eventually(kept, what="the cache on again, tracking the new primary", timeout=30)
        await other.update(tenant, a.id, dsl_json='{"v": 9}')
        assert (await tracked.resolve_dsl(tenant, a.id, draft=True))[0] == '{"v": 9}'
    finally:
        await tracked.resolved_cache.aclose()
        await client.aclose()
        await other_client.aclose()


async def updated(agents: AgentStore, tenant: str, agent_id: str, n: int) -> bool:
    """(The first write after a handover may meet the connection the Sentinels closed: written again.)"""
    try:
        await agents.update(tenant, agent_id, dsl_json=f'{{"v": {n}}}')
    except ConnectionError:
        return False
    return True


async def test_the_limits_windows_through_the_sentinels(sentinel):
    limiter = MovingWindowRateLimiter(limits_storage(sentinel.url, "trellis:test_limits"))
    item = RateLimitItemPerSecond(2, 60)
    key = uuid.uuid4().hex
    assert [await limiter.hit(item, key) for _ in range(3)] == [True, True, False]
