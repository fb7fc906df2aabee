"""The durable-run suite's replica deaths (tests/e2e/test_run_failover.py) on a real Redis Cluster of three
primaries with a replica each, as TRELLIS_REDIS_URL=redis+cluster://... names it: two orchestrator processes,
one killed -9 in the middle of an LLM stream or while its run waits for the user; the other takes the run over
(the lease, the take-over and the reaper's index on the cluster's nodes), a client rejoining gets the whole
answer once, and nothing that finished is sent to the model again."""

from __future__ import annotations

import asyncio
import json

import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from tests.e2e.test_run_failover import (FILL_UP_DSL, SCRIPTS, SLOW_TEXT, Replica, answer, calls, final_status,
                                         killed_mid_stream, taken_over, watch_to_end)
from tests.support.llm_gateway import llm_gateway
from tests.support.redis_cluster import RedisClusterServers


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    cluster = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def replicas(redis_cluster, tmp_path):
    async with llm_gateway(SCRIPTS) as llm:
        pair = [Replica(redis_cluster.url, llm.addr, tmp_path / f"orchestrator-{i}.log") for i in range(2)]
        try:
            await asyncio.gather(*(r.wait_serving() for r in pair))
            yield pair, llm.scripted
        finally:
            for r in pair:
                await r.close()


async def test_kill_9_mid_stream_the_other_replica_resumes_the_run_on_the_cluster(replicas):
    (a, b), provider = replicas
    seen = await killed_mid_stream(a)
    run_id, session_id = seen[0].run_id, seen[0].session_id
    await taken_over(b, run_id)
    whole = await watch_to_end(b.stub, run_id)
    assert whole[-1].WhichOneof("kind") == "run_finished" and whole[-1].run_finished.error == ""
    assert answer(whole) == SLOW_TEXT  # the whole answer, once
    assert [e.seq for e in whole] == sorted({e.seq for e in whole})
    started = [e.node_id for e in whole if e.WhichOneof("kind") == "node_started"]
    assert started == ["begin", "LLM:Plan", "LLM:Slow", "Message:Out"]
    assert calls(provider, "planner") == 1 and calls(provider, "slow") == 2  # finished: not sent again
    info = await final_status(b.stub, run_id)
    assert info.status == "succeeded" and info.attempts == 2
    nxt = [e async for e in b.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=FILL_UP_DSL, query="again",
                                                             session_id=session_id), timeout=60)]
    assert nxt[-1].run_finished.waiting_for_user  # the session is free for the next turn


async def test_kill_9_while_waiting_for_the_user_the_answer_goes_to_the_other_replica(replicas):
    (a, b), provider = replicas
    first = [e async for e in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=FILL_UP_DSL, query="q"),
                                          timeout=60)]
    assert first[-1].run_finished.waiting_for_user
    a.kill()
    second = [e async for e in b.stub.Run(canvas_pb.RunRequest(
        tenant_id="t1", dsl_json=FILL_UP_DSL, session_id=first[0].session_id,
        inputs_json=json.dumps({"feedback": "yes"})), timeout=60)]
    assert answer(second) == "final answer for yes"
    assert calls(provider, "planner") == 1
