"""Redis Cluster: every Lua script and MULTI/EXEC the orchestrator sends touches the keys of one hash slot (a
run's keys share `{run id}`, a session's `{session id}`, a tenant's agents `{tenant}`: store/keys.py). Each test
runs on a Redis in cluster mode with one node serving every slot (anything spanning slots fails with CROSSSLOT
as on any cluster; a plain client works), and on a real cluster of three primaries with a replica each, reached
as TRELLIS_REDIS_URL=redis+cluster://... names it (the keys of a run, a session, a tenant each on the node
serving their slot)."""

from __future__ import annotations

import asyncio
import json
import socket

import grpc
import pytest
import redis
from redis.crc import key_slot
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc

from services.orchestrator.store import RunStore, keys
from services.orchestrator.store.journal import JournalWriter, RunJournal, read_events
from services.orchestrator.store.redis_client import connect
from tests.support.orchestrator import orchestrator
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import RedisServer


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


ASK = json.dumps({"components": {
    "begin": cpn("Begin", ["UserFillUp:Ask"], {"prologue": "Hi."}),
    "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
        "enable_tips": True, "tips": "Which colour?",
        "inputs": {"colour": {"name": "colour", "type": "line", "optional": False, "options": []}}}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["colour: {UserFillUp:Ask@colour}"]}, ["UserFillUp:Ask"]),
}})


@pytest.fixture(scope="module", params=["one node", "three primaries"])
def cluster_redis(tmp_path_factory, request):
    if request.param == "one node":
        server = RedisServer(tmp_path_factory.mktemp("redis-cluster"), cluster=True)
    else:
        server = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"))
    server.start()
    yield server
    server.stop()


def test_a_cluster_node_whose_bus_port_is_taken_starts_on_another_port(tmp_path):
    server = RedisServer(tmp_path, cluster=True)
    chosen = server.port
    with socket.socket() as squatter:  # as an outgoing connection of another process may hold it
        squatter.bind(("127.0.0.1", chosen + 10000))
        squatter.listen()
        server.start()
    try:
        assert server.port != chosen
        assert b"cluster_state:ok" in redis.Redis(port=server.port).execute_command("CLUSTER", "INFO")
    finally:
        server.stop()


def test_the_keys_of_a_run_and_of_a_session_each_share_a_slot():
    run = {key_slot(k.encode()) for k in (keys.run("t1", "r1"), keys.run_events("t1", "r1"),
                                          keys.run_checkpoint("t1", "r1"), keys.run_log("t1", "r1", "thoughts"),
                                          keys.run_lease("r1"), keys.cancel_flag("r1"))}
    session = {key_slot(k.encode()) for k in (keys.session("t1", "s1"), keys.session_messages("t1", "s1"),
                                              keys.session_runs("t1", "s1"), keys.session_active_run("t1", "s1"))}
    tenant = {key_slot(k.encode()) for k in (keys.agent("t1", "a1"), keys.versions("t1", "a1"),
                                             keys.agents_by_update("t1"), keys.agent_titles("t1"),
                                             keys.agent_sessions("t1", "a1"), keys.mcp_server("t1", "m1"))}
    assert len(run) == len(session) == len(tenant) == 1
    assert keys.run("t1", "r1").startswith("t:t1:")  # still tenant-scoped
    # different runs spread over the cluster instead of sharing one slot
    assert len({key_slot(keys.run("t1", f"r{i}").encode()) for i in range(50)}) > 40


async def test_agents_sessions_and_runs_on_a_cluster(cluster_redis):
    async with orchestrator(cluster_redis.url) as orch, grpc.aio.insecure_channel(orch.addr) as channel:
        agents = agent_grpc.AgentServiceStub(channel)
        sessions = session_grpc.SessionServiceStub(channel)
        canvas = canvas_grpc.CanvasServiceStub(channel)
        agent = (await agents.CreateAgent(agent_pb.CreateAgentRequest(tenant_id="t1", title="c", dsl_json=ASK))).agent
        await agents.PublishVersion(agent_pb.PublishVersionRequest(tenant_id="t1", agent_id=agent.id))
        session = (await sessions.CreateSession(session_pb.CreateSessionRequest(tenant_id="t1", agent_id=agent.id))).session

        async def run(**fields) -> list:
            request = canvas_pb.RunRequest(tenant_id="t1", session_id=session.id,
                                           agent=canvas_pb.AgentTarget(agent_id=agent.id), **fields)
            return [e async for e in canvas.Run(request, timeout=30)]

        first = await run(query="a car")
        assert first[-1].run_finished.waiting_for_user
        second = await run(inputs_json=json.dumps({"colour": "red"}))  # resumes from a copy of the checkpoint
        answer = "".join(e.message_delta.content for e in second if e.WhichOneof("kind") == "message_delta")
        assert answer == "colour: red" and not second[-1].run_finished.error
        third = await run(query="a bike")  # waits again; a cancel ends the waiting run
        assert (await canvas.Cancel(canvas_pb.CancelRequest(tenant_id="t1", session_id=session.id))).cancelled
        runs = (await canvas.ListRuns(canvas_pb.ListRunsRequest(tenant_id="t1", session_id=session.id))).runs
        assert [r.status for r in runs] == ["cancelled", "succeeded", "succeeded"]
        watched = [e async for e in canvas.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=second[0].run_id),
                                                    timeout=30)]
        assert [e.seq for e in watched] == [e.seq for e in second]
        got = (await sessions.GetSession(session_pb.GetSessionRequest(tenant_id="t1", session_id=session.id))).session
        assert [m.content for m in got.messages][:3] == ["Hi.", "a car", "Which colour?"]
        assert third[0].run_id != second[0].run_id
        await sessions.DeleteSession(session_pb.DeleteSessionRequest(tenant_id="t1", session_id=session.id))
        await agents.DeleteAgent(agent_pb.DeleteAgentRequest(tenant_id="t1", agent_id=agent.id))


async def test_leases_take_over_cancel_and_finish_on_a_cluster(cluster_redis):
    redis = connect(cluster_redis.url)
    try:
        mine, other = RunStore(redis, owner="a", lease_s=0.3), RunStore(redis, owner="b", lease_s=0.3)
        assert not await mine.start("t1", "run-a", "sess-a", "agent-1")
        with pytest.raises(Exception, match="busy with run 'run-a'"):
            await mine.start("t1", "run-b", "sess-a", "agent-1")
        with pytest.raises(Exception, match="already exists"):
            await mine.start("t1", "run-a", "sess-b", "agent-1")
        assert not await redis.exists(keys.session_active_run("t1", "sess-b"))  # the refused claim is undone
        assert await mine.renew([("t1", "run-a", "sess-a", 1)]) == [True]
        journal = RunJournal(JournalWriter(redis), "t1", "run-a")
        journal.event(1, b"e1", "", record=None)
        journal.event(2, b"e2", "n", record={"n": "n"})
        await journal.aclose()
        assert [seq for seq, _ in await read_events(redis, "t1", "run-a")] == [1, 2]
        while await redis.exists(keys.run_lease("run-a")):  # mine stops renewing: the lease runs out
            await asyncio.sleep(0.05)
        assert ("t1", "run-a") in await other.expired()
        assert await other.take_over("t1", "run-a") == 2
        assert await mine.renew([("t1", "run-a", "sess-a", 1)]) == [False]  # lost to the other replica
        assert await other.claim_session("t1", "sess-a", "run-a")  # as a resume takes its session back
        assert await other.renew([("t1", "run-a", "sess-a", 2)]) == [True]
        assert await other.request_cancel("t1", session_id="sess-a")
        await other.finish("t1", "run-a", "sess-a", status="cancelled")
        assert (await other.status("t1", "run-a"))["status"] == "cancelled"
        assert not await redis.exists(keys.session_active_run("t1", "sess-a"))
        assert ("t1", "run-a") not in await other.expired()
    finally:
        await redis.aclose()
