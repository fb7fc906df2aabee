"""Schedules with real processes: orchestrator replicas (subprocesses) sharing one Redis, their schedulers' clock
a Redis key the test moves (TRELLIS_SCHEDULER_CLOCK_KEY), so a minute passes without waiting for one.

- two replicas: each tick fires exactly one run, with the tick's id; both replicas stop, a new one starts and
  the schedule goes on (missed ticks while none ran: one run, `catch_up: run_once`) or skips them (`skip`);
- the previous run still going (it waits on an HTTP server the test holds): `overlap` skip, cancel, enqueue;
- an end time: no tick after it.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest
from aiohttp import web
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import schedule_service_pb2 as sched_pb
from trellis.canvas.v1 import schedule_service_pb2_grpc as sched_grpc

from services.orchestrator.store import keys
from tests.e2e.test_run_failover import Replica, cpn
from tests.support.net import free_port
from tests.support.waiting import eventually

TENANT = "t1"
T0 = 1893456030  # 2030-01-01 00:00:30 UTC: the first "* * * * *" tick is T0 + 30
ECHO_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["Message:Out"]),
    "Message:Out": cpn("Message", [], {"content": ["scheduled: {sys.query}"]}, ["begin"]),
}})


def waiting_dsl(url: str) -> str:
    """A run that goes on until the test's HTTP server answers."""
    return json.dumps({"components": {
        "begin": cpn("Begin", ["Invoke:Wait"]),
        "Invoke:Wait": cpn("Invoke", ["Message:Out"], {"url": url, "method": "get", "timeout": 120}, ["begin"]),
        "Message:Out": cpn("Message", [], {"content": ["done"]}, ["Invoke:Wait"]),
    }})


class Cluster:
    def __init__(self, redis_url: str, redis, tmp_path) -> None:
        self.redis_url, self.redis, self.tmp_path = redis_url, redis, tmp_path
        self.clock_key = f"test:clock:{uuid.uuid4().hex}"
        self.replicas: list[Replica] = []
        self.started = 0

    async def start(self, count: int) -> None:
        new = []
        for _ in range(count):
            self.started += 1
            new.append(Replica(self.redis_url, f"127.0.0.1:{free_port()}", self.tmp_path / f"orch-{self.started}.log",
                               TRELLIS_SCHEDULER_CLOCK_KEY=self.clock_key, TRELLIS_SCHEDULER_POLL_S="0.05",
                               TRELLIS_SSRF_ALLOWLIST="127.0.0.1"))
        await asyncio.gather(*(r.wait_serving() for r in new))
        self.replicas += new

    async def stop_all(self) -> None:
        for r in self.replicas:
            await r.close()
        self.replicas = []

    async def set_clock(self, when: float) -> None:
        await self.redis.set(self.clock_key, repr(float(when)))

    @property
    def channel(self):
        return self.replicas[0].channel

    @property
    def schedules(self):
        return sched_grpc.ScheduleServiceStub(self.channel)

    async def agent(self, dsl: str) -> str:
        resp = await agent_grpc.AgentServiceStub(self.channel).CreateAgent(
            agent_pb.CreateAgentRequest(tenant_id=TENANT, title=f"a-{uuid.uuid4().hex[:6]}", dsl_json=dsl), timeout=30)
        return resp.agent.id

    async def schedule(self, agent_id: str, **fields) -> sched_pb.Schedule:
        fields.setdefault("cron", "* * * * *")
        fields.setdefault("draft", True)
        resp = await self.schedules.CreateSchedule(sched_pb.CreateScheduleRequest(
            tenant_id=TENANT, agent_id=agent_id, fields=sched_pb.ScheduleFields(**fields)), timeout=30)
        return resp.schedule

    async def get(self, agent_id: str, schedule_id: str) -> sched_pb.Schedule:
        return (await self.schedules.GetSchedule(sched_pb.GetScheduleRequest(
            tenant_id=TENANT, agent_id=agent_id, schedule_id=schedule_id), timeout=30)).schedule

    async def runs_of(self, schedule_id: str) -> set[str]:
        """Every run recorded for the schedule (its runs' ids start with its id)."""
        found = set()
        async for key in self.redis.scan_iter(match=f"t:{TENANT}:run:{{{schedule_id}-*}}"):
            found.add(key.decode().split("{", 1)[1].rstrip("}"))
        return found

    async def status(self, run_id: str) -> str:
        from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

        stub = canvas_grpc.CanvasServiceStub(self.channel)
        return (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id=TENANT, run_id=run_id), timeout=30)).run.status

    async def fires(self, agent_id: str, schedule_id: str, tick: int) -> sched_pb.Schedule:
        """Move the clock just past `tick` and wait until the schedule has moved past it."""
        await self.set_clock(tick + 1)

        async def moved():
            s = await self.get(agent_id, schedule_id)
            return s if s.next_fire_at != tick else None

        return await eventually(moved, what=f"tick {tick} handled")


@pytest.fixture
async def cluster(redis_server, redis_client, tmp_path):
    c = Cluster(redis_server.url, redis_client, tmp_path)
    await c.set_clock(T0)
    yield c
    await c.stop_all()


@pytest.fixture
async def holder():
    """An HTTP server whose answers wait until the test releases them."""
    release = asyncio.Event()
    arrived: list[str] = []

    async def wait(request: web.Request) -> web.Response:
        arrived.append(request.path)
        await release.wait()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/wait", wait)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}/wait", release, arrived
    release.set()
    await runner.cleanup()


async def test_two_replicas_fire_each_tick_once_and_a_restart_loses_nothing(cluster, redis_client):
    await cluster.start(2)
    agent_id = await cluster.agent(ECHO_DSL)
    s = await cluster.schedule(agent_id, query="hello", timezone="UTC")
    assert s.next_fire_at == T0 + 30 and s.enabled
    ticks = [T0 + 30 + 60 * i for i in range(3)]
    for tick in ticks:
        after = await cluster.fires(agent_id, s.id, tick)
        assert after.last_run_id == f"{s.id}-{tick}"
        assert after.next_fire_at == tick + 60
    expected = {f"{s.id}-{tick}" for tick in ticks}
    assert await cluster.runs_of(s.id) == expected
    for run_id in expected:
        assert await eventually(lambda: _ended(cluster, run_id), what=f"run {run_id}") == "succeeded"

    # every replica stops; a new one, 10 minutes later, runs the missed ticks once (catch_up run_once)
    await cluster.stop_all()
    await cluster.set_clock(ticks[-1] + 60 + 600 + 5)
    await cluster.start(1)
    missed = ticks[-1] + 60

    async def caught_up():
        got = await cluster.get(agent_id, s.id)
        return got if got.last_run_id == f"{s.id}-{missed}" else None

    got = await eventually(caught_up, what="the missed ticks run once")
    assert got.next_fire_at == ticks[-1] + 60 + 660  # the first tick after now
    assert await cluster.runs_of(s.id) == expected | {f"{s.id}-{missed}"}
    # and it goes on ticking
    after = await cluster.fires(agent_id, s.id, got.next_fire_at)
    assert after.last_run_id == f"{s.id}-{int(got.next_fire_at)}"
    assert len(await cluster.runs_of(s.id)) == 5


async def _ended(cluster: Cluster, run_id: str) -> str | None:
    status = await cluster.status(run_id)
    return status if status != "running" else None


async def test_missed_ticks_are_skipped_with_catch_up_skip(cluster):
    await cluster.start(1)
    agent_id = await cluster.agent(ECHO_DSL)
    s = await cluster.schedule(agent_id, catch_up="skip")
    await cluster.set_clock(T0 + 30 + 600)  # ten minutes after the first tick: no replica looked meanwhile

    async def skipped():
        got = await cluster.get(agent_id, s.id)
        return got if got.next_fire_at != T0 + 30 else None

    got = await eventually(skipped, what="the missed tick skipped")
    assert got.next_fire_at == T0 + 30 + 660 and got.last_run_id == ""
    assert await cluster.runs_of(s.id) == set()


async def test_a_time_zone_and_an_end_time(cluster):
    await cluster.start(1)
    agent_id = await cluster.agent(ECHO_DSL)
    # 00:00:30 UTC is 09:00:30 in Tokyo: "1 9 * * *" there is 00:01 UTC; the day after is past the end
    s = await cluster.schedule(agent_id, cron="1 9 * * *", timezone="Asia/Tokyo", end_at=T0 + 3600)
    assert s.next_fire_at == T0 + 30
    after = await cluster.fires(agent_id, s.id, T0 + 30)
    assert after.last_run_id == f"{s.id}-{T0 + 30}"
    assert after.next_fire_at == 0  # nothing after the end time
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await cluster.schedule(agent_id, cron="* * * * * *")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("overlap", ["skip", "cancel", "enqueue"])
async def test_overlap_policies(cluster, holder, overlap):
    url, release, arrived = holder
    await cluster.start(1)
    agent_id = await cluster.agent(waiting_dsl(url))
    s = await cluster.schedule(agent_id, overlap=overlap)
    first_tick, second_tick = T0 + 30, T0 + 90
    first = f"{s.id}-{first_tick}"
    await cluster.fires(agent_id, s.id, first_tick)
    await eventually(lambda: len(arrived) == 1, what="the first run waiting on the server")
    assert await cluster.status(first) == "running"
    after = await cluster.fires(agent_id, s.id, second_tick)
    if overlap == "skip":
        assert after.last_run_id == first and not after.pending
        assert await cluster.runs_of(s.id) == {first}
        release.set()
    elif overlap == "cancel":
        assert after.last_run_id == f"{s.id}-{second_tick}"
        assert await eventually(lambda: _ended(cluster, first), what="the first run's end") == "cancelled"
        release.set()
    else:
        assert after.last_run_id == first and after.pending
        assert await cluster.runs_of(s.id) == {first}
        release.set()  # the first run ends; the queued tick fires then
        queued = f"{s.id}-q{second_tick}"

        async def fired():
            got = await cluster.get(agent_id, s.id)
            return got if got.last_run_id == queued and not got.pending else None

        await eventually(fired, what="the queued tick fired after the first run")
        assert await cluster.runs_of(s.id) == {first, queued}
        assert await eventually(lambda: _ended(cluster, queued), what="the queued run") == "succeeded"


async def test_trigger_now_and_crud(cluster):
    await cluster.start(1)
    agent_id = await cluster.agent(ECHO_DSL)
    s = await cluster.schedule(agent_id, query="now")
    stub = cluster.schedules
    fired = await stub.TriggerSchedule(sched_pb.TriggerScheduleRequest(tenant_id=TENANT, agent_id=agent_id,
                                                                       schedule_id=s.id), timeout=30)
    assert fired.run_id.startswith(f"{s.id}-now-")
    assert await eventually(lambda: _ended(cluster, fired.run_id), what="the triggered run") == "succeeded"
    updated = (await stub.UpdateSchedule(sched_pb.UpdateScheduleRequest(
        tenant_id=TENANT, agent_id=agent_id, schedule_id=s.id,
        fields=sched_pb.ScheduleFields(enabled=False)), timeout=30)).schedule
    assert not updated.enabled and updated.next_fire_at == 0 and updated.query == "now"
    listed = (await stub.ListSchedules(sched_pb.ListSchedulesRequest(tenant_id=TENANT, agent_id=agent_id))).schedules
    assert [x.id for x in listed] == [s.id]
    deleted = await stub.DeleteSchedule(sched_pb.DeleteScheduleRequest(tenant_id=TENANT, agent_id=agent_id,
                                                                       schedule_id=s.id), timeout=30)
    assert deleted.deleted
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await cluster.get(agent_id, s.id)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert not await cluster.redis.zscore(keys.SCHEDULES_DUE, f"{TENANT}/{s.id}")
