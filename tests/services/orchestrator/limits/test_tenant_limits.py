"""Limits per tenant through real orchestrators (gRPC, the real Redis, a real limits file): a tenant over its
concurrency or rate limit is refused RESOURCE_EXHAUSTED with RetryInfo, QuotaFailure and the RateLimit trailers
while another tenant is admitted; a refused request leaves no session claim and no run in Redis; two replicas on
one Redis share one limit; a changed file applies without a restart; held streams are limited too; a model
call's tokens are counted for its tenant; and a run's Redis round trips are the same with limits on."""

from __future__ import annotations

import asyncio
import json
import uuid
from contextlib import AsyncExitStack

import grpc
import pytest
from prometheus_client import REGISTRY
from redis.asyncio.connection import Connection as PlainConnection
from trellis.canvas.internal.v1 import run_turn_service_pb2 as turn_pb
from trellis.canvas.internal.v1 import run_turn_service_pb2_grpc as turn_grpc
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.common.status_details import refusal
from services.common.turns import ClientTurnTypes, TurnClient
from services.orchestrator.components.base import Component, register
from services.orchestrator.store import keys
from services.orchestrator.store._redis_fast import Connection as FastConnection
from tests.support.orchestrator import orchestrator
from tests.support.redis_round_trips import count_round_trips, quiet_replica
from tests.support.waiting import eventually

GATES: dict[str, asyncio.Event] = {}  # a held run waits for its gate to open (the test's loop is the server's)


@register
class HoldForLimitsTest(Component):
    """Test-only: waits until the test opens gate `gate`, so a run stays running while others are admitted."""

    component_name = "HoldForLimitsTest"

    async def run(self, ctx):
        await GATES.setdefault(str(self.params.given("gate")), asyncio.Event()).wait()
        ctx.set_output("result", "released")


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


def held(gate: str) -> str:
    return json.dumps({"components": {
        "begin": cpn("Begin", ["HoldForLimitsTest:h"]),
        "HoldForLimitsTest:h": cpn("HoldForLimitsTest", ["Message:Out"], {"gate": gate}, ["begin"]),
        "Message:Out": cpn("Message", [], {"content": ["{HoldForLimitsTest:h@result}"]}, ["HoldForLimitsTest:h"]),
    }})


ECHO = json.dumps({"components": {
    "begin": cpn("Begin", ["Message:Out"]),
    "Message:Out": cpn("Message", [], {"content": ["You said: {sys.query}"]}, ["begin"]),
}})


def write_limits(path, limits: dict) -> None:
    import yaml

    path.write_text(yaml.safe_dump(limits))


@pytest.fixture
def tenants() -> tuple[str, str]:
    run = uuid.uuid4().hex[:8]
    return f"acme-{run}", f"other-{run}"


class Holding:
    """A run held open at its gate: started, its first event read, until `release()`."""

    def __init__(self, stub, tenant: str, **fields) -> None:
        self.gate = uuid.uuid4().hex
        GATES[self.gate] = asyncio.Event()
        self.call = stub.Run(canvas_pb.RunRequest(tenant_id=tenant, dsl_json=held(self.gate), **fields), timeout=60)

    async def started(self) -> Holding:
        first = await self.call.read()
        assert first.WhichOneof("kind") == "run_started"
        self.run_id, self.session_id = first.run_id, first.session_id
        return self

    async def release(self) -> list:
        GATES[self.gate].set()
        return await read_all(self.call)


async def read_all(call) -> list:
    """The rest of a stream read with `read()` (a call read so may not be iterated)."""
    events = []
    while (event := await call.read()) != grpc.aio.EOF:
        events.append(event)
    return events


async def run_all(stub, tenant: str, **fields) -> list:
    return [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id=tenant, dsl_json=ECHO, query="hi", **fields),
                                      timeout=30)]


def admitted(stub, tenant: str):
    """A check for `eventually`: a run of the tenant admitted and finished (False: refused for now)."""
    async def check() -> bool:
        try:
            return (await run_all(stub, tenant))[-1].WhichOneof("kind") == "run_finished"
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.details()
            return False
    return check


async def refused(stub, tenant: str, **fields) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await run_all(stub, tenant, **fields)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
    return err.value


@pytest.fixture
async def one(redis_server, tmp_path, tenants):
    path = tmp_path / "limits.yaml"
    acme, _ = tenants
    write_limits(path, {"tenants": {acme: {"concurrent_runs": 1, "held_streams": 3}}})
    async with orchestrator(redis_server.url, limits_file=str(path)) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            yield canvas_grpc.CanvasServiceStub(channel), path, orch.addr


async def test_over_its_concurrency_a_tenant_is_refused_with_when_to_retry_while_another_is_admitted(one, tenants):
    stub, _, _ = one
    acme, other = tenants
    holding = await Holding(stub, acme).started()
    err = await refused(stub, acme)
    assert f"tenant '{acme}' is at its limit of 1 concurrent runs" in err.details()
    said = refusal(err.trailing_metadata())
    assert said.retry_after_s and said.retry_after_s > 0
    assert said.violations == [(f"tenant:{acme}", "concurrent_runs")]
    trailers = dict(err.trailing_metadata())
    assert trailers["ratelimit-policy"] == '"concurrent_runs";q=1;qu="concurrent-requests"'
    assert trailers["ratelimit"] == '"concurrent_runs";r=0;t=1'
    assert (await run_all(stub, other))[-1].WhichOneof("kind") == "run_finished"  # another tenant, meanwhile
    assert (await holding.release())[-1].run_finished.error == ""
    assert (await run_all(stub, acme))[-1].WhichOneof("kind") == "run_finished"  # its slot is free again


async def test_a_gateway_run_turn_is_refused_with_the_same_details(one, tenants):
    """The gateway starts its runs as turns of RunTurnService: a refused turn raises what the call would."""
    stub, _, addr = one
    acme, other = tenants
    holding = await Holding(stub, acme).started()
    async with grpc.aio.insecure_channel(addr) as channel:
        turns = TurnClient(turn_grpc.RunTurnServiceStub(channel).RunTurns,
                           ClientTurnTypes(turn_pb.RunTurnsRequest, turn_pb.RunTurn, turn_pb.RunTurnMessage),
                           peer="orchestrator")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                [e async for e in turns.call(canvas_pb.RunRequest(tenant_id=acme, dsl_json=ECHO), timeout=30)]
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert f"tenant '{acme}' is at its limit of 1 concurrent runs" in err.value.details()
            said = refusal(err.value.trailing_metadata())
            assert said.retry_after_s > 0 and said.violations == [(f"tenant:{acme}", "concurrent_runs")]
            assert dict(err.value.trailing_metadata())["ratelimit"] == '"concurrent_runs";r=0;t=1'
            admitted_turn = [e async for e in turns.call(canvas_pb.RunRequest(tenant_id=other, dsl_json=ECHO),
                                                         timeout=30)]
            assert admitted_turn[-1].WhichOneof("kind") == "run_finished"
        finally:
            await turns.close()
    await holding.release()


async def test_a_refused_request_leaves_no_session_claim_and_no_run(one, tenants, redis_client):
    stub, _, _ = one
    acme, _ = tenants
    idle = (await run_all(stub, acme))[0].session_id  # a session that ran before, idle now
    runs_before = await redis_client.zrange(keys.session_runs(acme, idle), 0, -1)
    sessions_before = {k async for k in redis_client.scan_iter(match=f"t:{acme}:session:*")}
    holding = await Holding(stub, acme).started()
    await refused(stub, acme, session_id=idle, run_id="refused-on-a-session")
    await refused(stub, acme, run_id="refused-new-session")
    for run_id in ("refused-on-a-session", "refused-new-session"):
        assert not await redis_client.exists(keys.run(acme, run_id), keys.run_lease(run_id),
                                             keys.run_events(acme, run_id))
        assert await redis_client.zscore(keys.ACTIVE_RUNS, f"{acme}/{run_id}") is None
    assert not await redis_client.exists(keys.session_active_run(acme, idle))
    assert await redis_client.zrange(keys.session_runs(acme, idle), 0, -1) == runs_before
    sessions_after = {k async for k in redis_client.scan_iter(match=f"t:{acme}:session:*")}
    assert sessions_after - sessions_before == {k for k in sessions_after if holding.session_id.encode() in k}
    await holding.release()


async def test_over_its_rate_a_tenant_is_refused_while_another_is_admitted(redis_server, tmp_path, tenants):
    acme, other = tenants
    path = tmp_path / "limits.yaml"
    write_limits(path, {"tenants": {acme: {"runs_per_second": 0.2, "burst": 1}}})  # 1 in any 5 s
    async with orchestrator(redis_server.url, limits_file=str(path)) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            stub = canvas_grpc.CanvasServiceStub(channel)
            await run_all(stub, acme)
            err = await refused(stub, acme)
            assert f"tenant '{acme}' is at its limit of 0.2 runs per second" in err.details()
            said = refusal(err.trailing_metadata())
            assert 0 < said.retry_after_s <= 5 and said.violations == [(f"tenant:{acme}", "runs_per_second")]
            assert dict(err.trailing_metadata())["ratelimit-policy"] == '"runs_per_second";q=1;w=5'
            for _ in range(3):
                assert (await run_all(stub, other))[-1].WhichOneof("kind") == "run_finished"


async def test_two_replicas_on_one_redis_hold_one_limit(redis_server, tmp_path, tenants):
    acme, other = tenants
    path = tmp_path / "limits.yaml"
    write_limits(path, {"tenants": {acme: {"concurrent_runs": 2}}})
    async with AsyncExitStack() as stack:
        stubs = []
        for _ in range(2):
            orch = await stack.enter_async_context(orchestrator(redis_server.url, limits_file=str(path),
                                                                run_lease_s=1.5))
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(orch.addr))
            stubs.append(canvas_grpc.CanvasServiceStub(channel))
        holdings = [await Holding(stub, acme).started() for stub in stubs]  # one run on each replica
        for stub in stubs:
            err = await refused(stub, acme)
            assert "at its limit of 2 concurrent runs" in err.details()
            assert (await run_all(stub, other))[-1].WhichOneof("kind") == "run_finished"
        # The first replica's run ends: its slot goes back to Redis at its next reconcile, and the second
        # replica's next lease gets it.
        await holdings[0].release()
        await eventually(admitted(stubs[1], acme), what="the freed slot admitted on the other replica")
        await holdings[1].release()


async def test_a_changed_limits_file_applies_without_a_restart(one, tenants, caplog):
    stub, path, _ = one
    acme, _ = tenants
    holding = await Holding(stub, acme).started()
    await refused(stub, acme)
    write_limits(path, {"tenants": {acme: {"concurrent_runs": 2}}})

    await eventually(admitted(stub, acme), what="the second run admitted under the new limit")
    path.write_text(f"tenants: {{{acme}: {{concurrent_runs: many}}}}")  # a bad file: logged, the limits stay
    await eventually(lambda: f"tenants.{acme}.concurrent_runs" in caplog.text, what="the bad field logged")
    second = await Holding(stub, acme).started()  # 2 of 2: the limit of the last good file
    err = await refused(stub, acme)
    assert "at its limit of 2 concurrent runs" in err.details()
    await holding.release()
    await second.release()


async def test_held_streams_are_limited(one, tenants):
    stub, _, _ = one
    acme, _ = tenants
    holding = await Holding(stub, acme).started()  # one stream (and the tenant's one run)
    watchers = [stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id=acme, run_id=holding.run_id), timeout=60)
                for _ in range(2)]
    for watcher in watchers:
        assert (await watcher.read()).WhichOneof("kind") == "run_started"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        third = stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id=acme, run_id=holding.run_id), timeout=60)
        await third.read()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"tenant '{acme}' is at its limit of 3 held streams" in err.value.details()
    await holding.release()
    for watcher in watchers:
        assert (await read_all(watcher))[-1].WhichOneof("kind") == "run_finished"


async def test_round_trips_per_run_are_the_same_with_limits_on(redis_server, tmp_path, tenants, monkeypatch):
    acme, _ = tenants
    quiet = quiet_replica(monkeypatch)  # the replica's own periodic work: only the runs' round trips count
    path = tmp_path / "limits.yaml"
    # A burst of a minute's worth: the run starts' lease lasts its window (burst / rate), so the 20 runs are spent
    # from one lease however slow the machine (with a 1 s window, a run after it leases again, inline).
    write_limits(path, {"defaults": {"concurrent_runs": 1000, "runs_per_second": 1000, "burst": 60_000,
                                     "tokens_per_minute": 10_000_000, "held_streams": 1000}})
    counts = {}
    for name, limits_file in (("off", ""), ("on", str(path))):
        async with orchestrator(redis_server.url, limits_file=limits_file, run_lease_s=120.0, triggers=quiet) as orch:
            async with grpc.aio.insecure_channel(orch.addr) as channel:
                stub = canvas_grpc.CanvasServiceStub(channel)
                await run_all(stub, acme)  # connections open, scripts loaded, the tenant's first leases
                sent = count_round_trips(monkeypatch)
                windows = count_other_clients(monkeypatch)  # the `limits` package's own client (moving windows)
                for _ in range(20):
                    await run_all(stub, acme)
                counts[name] = len(sent) + len(windows)
                sent.clear()
                windows.clear()
    print(f"Redis round trips per run: {counts['off'] / 20:g} without limits, {counts['on'] / 20:g} with")
    assert counts["on"] == counts["off"], counts


def count_other_clients(monkeypatch) -> list:
    """What Redis clients other than the orchestrator's own send (count_round_trips counts that one's)."""
    sent: list = []
    real = PlainConnection.send_packed_command

    async def send(self, command, check_health=True):
        if not isinstance(self, FastConnection):
            sent.append(command)
        return await real(self, command, check_health)

    monkeypatch.setattr(PlainConnection, "send_packed_command", send)
    return sent


def _sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_admitted_refused_and_running_are_counted_per_tenant(one, tenants):
    stub, _, _ = one
    acme, _ = tenants
    admitted = _sample("trellis_tenant_runs_admitted_total", tenant=acme)
    holding = await Holding(stub, acme).started()
    assert _sample("trellis_tenant_runs_running", tenant=acme) == 1
    await refused(stub, acme)
    assert _sample("trellis_tenant_refused_total", tenant=acme, limit="concurrent_runs") == 1
    assert _sample("trellis_tenant_runs_admitted_total", tenant=acme) == admitted + 1
    await holding.release()
    await eventually(lambda: _sample("trellis_tenant_runs_running", tenant=acme) == 0, what="the run's end counted")


TOKENS_SCRIPTS = {"chat": {"big": [{"reply": "a long answer",
                                    "usage": {"prompt_tokens": 400, "completion_tokens": 300}}]}}
LLM = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Talk"]),
    "LLM:Talk": cpn("LLM", ["Message:Out"], {"llm_id": "big@Scripted", "sys_prompt": "Talk.",
                                              "prompts": [{"role": "user", "content": "{sys.query}"}]}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Talk@content}"]}, ["LLM:Talk"]),
}})


@pytest.mark.parametrize("llm", [TOKENS_SCRIPTS], indirect=True)
async def test_a_models_tokens_are_counted_for_its_tenant_and_its_tokens_per_minute(redis_server, tmp_path, tenants,
                                                                                   llm):
    acme, other = tenants
    path = tmp_path / "limits.yaml"
    write_limits(path, {"tenants": {acme: {"tokens_per_minute": 1000}}})
    tokens = _sample("trellis_tenant_llm_tokens_total", tenant=acme)
    async with orchestrator(redis_server.url, limits_file=str(path), llm_gateway_addr=llm.addr) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            stub = canvas_grpc.CanvasServiceStub(channel)
            for _ in range(2):  # 1400 of the minute's 1000: the second run was admitted before they were used
                events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id=acme, dsl_json=LLM, query="q"))]
                assert events[-1].run_finished.error == ""
            assert _sample("trellis_tenant_llm_tokens_total", tenant=acme) == tokens + 1400

            async def out_of_tokens() -> grpc.aio.AioRpcError | None:
                try:
                    await run_all(stub, acme)
                except grpc.aio.AioRpcError as exc:
                    return exc
                return None

            err = await eventually(out_of_tokens, what="the tenant refused for its tokens this minute")
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert f"tenant '{acme}' is at its limit of 1000 LLM tokens per minute" in err.details()
            assert 0 < refusal(err.trailing_metadata()).retry_after_s <= 60
            assert (await run_all(stub, other))[-1].WhichOneof("kind") == "run_finished"


async def test_past_the_replicas_capacity_runs_wait_their_turn_and_past_the_bound_are_refused(redis_server, tmp_path,
                                                                                             tenants):
    acme, _ = tenants
    path = tmp_path / "limits.yaml"
    # One run at a time on this replica; before it has seen runs end, it expects one every 30 s: one run may
    # wait (30 s), a second would wait 60 s and is refused at once.
    write_limits(path, {"capacity": {"runs": 1, "max_wait_s": 30}})
    async with orchestrator(redis_server.url, limits_file=str(path)) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            stub = canvas_grpc.CanvasServiceStub(channel)
            running = await Holding(stub, acme).started()
            waiting = asyncio.ensure_future(run_all(stub, acme))
            await eventually(lambda: _sample("trellis_tenant_runs_waiting", tenant=acme) == 1,
                             what="the second run waiting for the slot")
            err = await refused(stub, acme, run_id="over-the-bound")
            assert "capacity of 1 runs" in err.details()
            said = refusal(err.trailing_metadata())
            assert said.retry_after_s >= 30 and said.violations == [(f"tenant:{acme}", "capacity")]
            assert dict(err.trailing_metadata())["ratelimit-policy"] == '"capacity";q=1;qu="concurrent-requests"'
            assert not waiting.done()
            await running.release()
            assert (await waiting)[-1].WhichOneof("kind") == "run_finished"  # its turn came


async def test_a_child_run_is_part_of_its_callers_admission(one, tenants):
    """An AgentCall's child run takes no slot of its own: at a limit of 1 the caller and its child both run."""
    stub, _, addr = one
    acme, _ = tenants
    async with grpc.aio.insecure_channel(addr) as channel:
        agents = agent_grpc.AgentServiceStub(channel)
        helper = (await agents.CreateAgent(agent_pb.CreateAgentRequest(tenant_id=acme, title="helper",
                                                                       dsl_json=ECHO))).agent.id
    caller = json.dumps({"components": {
        "begin": cpn("Begin", ["AgentCall:Ask"]),
        "AgentCall:Ask": cpn("AgentCall", ["Message:Out"], {"agent_id": helper, "query": "from the caller"},
                             ["begin"]),
        "Message:Out": cpn("Message", [], {"content": ["{AgentCall:Ask@content}"]}, ["AgentCall:Ask"]),
    }})
    events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id=acme, dsl_json=caller), timeout=30)]
    assert events[-1].run_finished.error == ""
    assert "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta") == \
        "You said: from the caller"


async def test_an_api_keys_limit_applies_besides_its_tenants(redis_server, tmp_path, tenants):
    acme, _ = tenants
    path = tmp_path / "limits.yaml"
    write_limits(path, {"tenants": {acme: {"concurrent_runs": 5,
                                           "api_keys": {"3f2a9c0d1e2b4a5f": {"concurrent_runs": 1}}}}})
    async with orchestrator(redis_server.url, limits_file=str(path)) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            stub = canvas_grpc.CanvasServiceStub(channel)
            holding = await Holding(stub, acme, api_key_id="3f2a9c0d1e2b4a5f").started()
            err = await refused(stub, acme, api_key_id="3f2a9c0d1e2b4a5f")
            assert f"tenant '{acme}' api key '3f2a9c0d1e2b4a5f' is at its limit of 1 concurrent runs" in err.details()
            assert (await run_all(stub, acme, api_key_id="another-key-id"))[-1].WhichOneof("kind") == "run_finished"
            await holding.release()
