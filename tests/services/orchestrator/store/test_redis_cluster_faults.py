"""Runs on a real Redis Cluster (three primaries, a replica each: tests/support/redis_cluster.py) while the
cluster changes under them: a slot migrated to another primary (clients meet ASK, then MOVED), a replica taking
over from its live primary (CLUSTER FAILOVER), a primary killed -9 (its replica elected in its place). Each time
a dozen runs stream through one orchestrator, the change made once every run has streamed part of its answer
and targeted at the slots their keys live in. Every run ends as it would have without the change (its whole
answer once, no error), its stream read again from the start is what its client saw (nothing lost, nothing
twice), and nothing was refused for spanning slots (CROSSSLOT)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import uuid

import grpc
import pytest
from redis.crc import key_slot
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.store import RunStore, keys
from services.orchestrator.store.redis_client import connect
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.redis_cluster import RedisClusterServers
from tests.support.waiting import eventually

RUNS = 12
TEXT = " ".join(f"w{i}" for i in range(30))
SCRIPTS = {"chat": {"slow": {"turns": [{"reply": TEXT, "chunk_delay_s": 0.05}]}}}
SLOW_DSL = json.dumps({"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["LLM:Slow"], "upstream": []},
    "LLM:Slow": {"obj": {"component_name": "LLM", "params": {
        "llm_id": "slow@Scripted", "sys_prompt": "S.", "prompts": [{"role": "user", "content": "{sys.query}"}]}},
        "downstream": ["Message:Out"], "upstream": ["begin"]},
    "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["{LLM:Slow@content}"]}},
                    "downstream": [], "upstream": ["LLM:Slow"]},
}})


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    cluster = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def stub(redis_cluster):
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_cluster.url, llm_gateway_addr=llm.addr) as orch, \
            grpc.aio.insecure_channel(orch.addr) as channel:
        yield canvas_grpc.CanvasServiceStub(channel)


def answer(events) -> str:
    return "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta")


async def runs_through(stub, change) -> list[list]:
    """RUNS streaming runs; `change(run ids)` (blocking, in a thread) once each has streamed an answer delta.
    What each client saw."""
    seen: list[list] = [[] for _ in range(RUNS)]
    streaming = [asyncio.Event() for _ in range(RUNS)]

    async def one(i: int) -> None:
        request = canvas_pb.RunRequest(tenant_id="t1", dsl_json=SLOW_DSL, query=f"q{i}")
        async for event in stub.Run(request, timeout=90):
            seen[i].append(event)
            if event.WhichOneof("kind") == "message_delta":
                streaming[i].set()

    async def then_change() -> None:
        await asyncio.gather(*(e.wait() for e in streaming))
        await asyncio.to_thread(change, [events[0].run_id for events in seen])

    await asyncio.gather(then_change(), *(one(i) for i in range(RUNS)))
    return seen


async def assert_nothing_lost(stub, seen: list[list], caplog) -> None:
    for events in seen:
        assert events[-1].WhichOneof("kind") == "run_finished" and events[-1].run_finished.error == "", events[-1]
        assert answer(events) == TEXT  # every token once
        run_id = events[0].run_id
        stored = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=run_id), timeout=30)]
        assert [e.seq for e in stored] == [e.seq for e in events]  # the stream a rejoining client reads
        info = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=run_id))).run
        assert info.status == "succeeded" and info.attempts == 1
    assert not [r.getMessage() for r in caplog.records if "CROSSSLOT" in r.getMessage()]


def run_slot(run_id: str) -> int:
    return key_slot(keys.run("t1", run_id).encode())


async def test_slots_migrated_to_another_primary_in_the_middle_of_runs(redis_cluster, stub, caplog):
    caplog.set_level(logging.WARNING)
    moving = []

    def migrate(run_ids: list[str]) -> None:
        for slot, run_id in {run_slot(r): r for r in run_ids[:4]}.items():
            source = redis_cluster.primary_of_slot(slot)
            target = next(p for p in redis_cluster.primaries() if p is not source)
            redis_cluster.begin_migration(slot, target)
            # the slot split: the run's stream moved, its checkpoint and record not yet
            redis_cluster.move_keys(slot, source, target, [keys.run_events("t1", run_id)])
            moving.append((slot, source, target))
        time.sleep(0.5)  # the runs write meanwhile: ASK for a moved key, TRYAGAIN for a script across the split
        for slot, source, target in moving:
            redis_cluster.finish_migration(slot, source, target)

    seen = await runs_through(stub, migrate)
    await assert_nothing_lost(stub, seen, caplog)
    for slot, _, target in moving:
        assert redis_cluster.primary_of_slot(slot) is target


async def test_a_replica_taking_over_from_its_primary_in_the_middle_of_runs(redis_cluster, stub, caplog):
    caplog.set_level(logging.WARNING)

    def failover(run_ids: list[str]) -> None:
        primary = redis_cluster.primary_of_slot(run_slot(run_ids[0]))
        redis_cluster.failover(redis_cluster.replica_of(primary))

    seen = await runs_through(stub, failover)
    await assert_nothing_lost(stub, seen, caplog)


async def test_a_primary_killed_in_the_middle_of_runs(redis_cluster, stub, caplog):
    """Until its replica is elected (the node timeout, then an election: a few seconds here) the cluster refuses
    every write (cluster-require-full-coverage, Redis's default): a run that ends meanwhile may fail to store its
    end, and is then taken over once its lease runs out and ended by its new owner, as after a Redis restart
    (docs/durability.md). Every run still ends, its stream whole."""
    caplog.set_level(logging.WARNING)
    killed = []

    def kill(run_ids: list[str]) -> None:
        primary = redis_cluster.primary_of_slot(run_slot(run_ids[0]))
        redis_cluster.kill_primary(primary)
        killed.append(primary)

    try:
        seen = await runs_through(stub, kill)
        for events in seen:
            assert events[-1].WhichOneof("kind") == "run_finished" and events[-1].run_finished.error == ""
            run_id = events[0].run_id
            await eventually(lambda: ended(stub, run_id), what=f"the end of run {run_id}", timeout=90)
            stored = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=run_id),
                                                     timeout=60)]
            assert stored[-1].WhichOneof("kind") == "run_finished" and stored[-1].run_finished.error == ""
            assert answer(stored) == TEXT  # a client rejoining from the start gets the whole answer once
            assert [e.seq for e in stored] == sorted({e.seq for e in stored})
        assert not [r.getMessage() for r in caplog.records if "CROSSSLOT" in r.getMessage()]
    finally:
        for node in killed:  # back, as a replica of the node elected in its place
            await asyncio.to_thread(redis_cluster.restart, node)


async def ended(stub, run_id: str) -> bool:
    info = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=run_id), timeout=30)).run
    assert info.status in ("running", "succeeded"), info
    return info.status == "succeeded"


async def test_a_run_whose_end_fails_on_its_node_alone_is_still_taken_over(redis_cluster):
    """The end's round trip spans nodes: its script on the run's node, the active set on another's. With the
    run's node down and the other up, the run leaves the active set while its end is not stored; it is put back
    (store/runs.py `reinstate`), so once its node is back (its replica elected) a reaper takes it over."""
    redis = connect(redis_cluster.url)
    try:
        mine, other = RunStore(redis, owner="a", lease_s=1.0), RunStore(redis, owner="b", lease_s=1.0)
        active = redis_cluster.primary_of_key(keys.ACTIVE_RUNS)
        run_id = next(r for r in (uuid.uuid4().hex for _ in range(100))
                      if redis_cluster.primary_of_key(keys.run("t1", r)) is not active)
        await mine.start("t1", run_id, "", "agent-1")
        node = redis_cluster.primary_of_key(keys.run("t1", run_id))
        replica = await asyncio.to_thread(redis_cluster.kill_synced, node)
        with pytest.raises(Exception):
            await mine.finish("t1", run_id, "", status="succeeded")  # refused by the dead node alone
        await asyncio.to_thread(redis_cluster.wait_elected, replica)
        assert (await other.status("t1", run_id))["status"] == "running"

        async def orphan_found() -> bool:
            return ("t1", run_id) in await other.expired()

        await eventually(orphan_found, what="the run whose end failed, due for a take-over", timeout=30,
                         ignoring=(ConnectionError,))
        assert await other.take_over("t1", run_id) == 2
    finally:
        await redis.aclose()
        await asyncio.to_thread(redis_cluster.restart, node)
