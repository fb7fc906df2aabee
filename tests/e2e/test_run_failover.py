"""Fault injection with real processes: two orchestrator replicas (subprocesses) share one Redis and one
llm_gateway (in this process, scripted, counting every model request).

- `kill -9` of the replica running a canvas in the middle of an LLM stream: the other replica resumes the run
  within a few leases, a client that rejoins gets the whole answer once, the LLM call that had finished is not
  sent again, and the session takes the next turn.
- SIGSTOP of that replica instead, let go once the other took the run over: its writes are refused (fencing),
  so the run's stream holds nothing of it after the take-over; it stops driving the run, and its own caller
  goes on, with no error, with what the new owner writes; a client that rejoins gets each output once. Let go
  only once the new owner finished the run, it starts no component more: the model gets no request from it.
- `kill -9` of the replica running a client's stream through the HTTP gateway: the client rejoins
  (Last-Event-ID) at once, is never told "unavailable", and is told that the interrupted component started
  again before its whole output.
- `kill -9` while a run waits for UserFillUp: the answer goes to the surviving replica.
- Redis restarts in the middle of a run: the run ends (finished or with a clear error) and nothing that was
  stored is lost.
- The llm_gateway goes away in the middle of a call: the run fails with an error naming it, never a hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.orchestrator.runs.resume import TAKE_OVER_GAP
from services.orchestrator.store import SessionStore, keys
from services.orchestrator.store.journal import read_events
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 1.0
SLOW_TEXT = " ".join(f"w{i}" for i in range(40))
SCRIPTS = {"chat": {
    "planner": ["plan: search the web"],
    "writer": ["final answer for {last_user}"],
    "slow": {"turns": [{"reply": SLOW_TEXT, "chunk_delay_s": 0.05}]},
}}


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


def llm(model: str, prompt: str) -> dict:
    return {"llm_id": f"{model}@Scripted", "sys_prompt": "S.", "prompts": [{"role": "user", "content": prompt}]}


# Begin -> a fast LLM (finishes first) -> a slow LLM (killed mid-stream) -> Message
TWO_LLM_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Plan"]),
    "LLM:Plan": cpn("LLM", ["LLM:Slow"], llm("planner", "{sys.query}"), ["begin"]),
    "LLM:Slow": cpn("LLM", ["Message:Out"], llm("slow", "{LLM:Plan@content}"), ["LLM:Plan"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Slow@content}"]}, ["LLM:Slow"]),
}})
# Begin -> a slow LLM (paused mid-stream) -> a fast LLM -> Message
SLOW_THEN_PLAN_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Slow"]),
    "LLM:Slow": cpn("LLM", ["LLM:Plan"], llm("slow", "{sys.query}"), ["begin"]),
    "LLM:Plan": cpn("LLM", ["Message:Out"], llm("planner", "{LLM:Slow@content}"), ["LLM:Slow"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Plan@content}"]}, ["LLM:Plan"]),
}})
FILL_UP_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Plan"]),
    "LLM:Plan": cpn("LLM", ["UserFillUp:Ask"], llm("planner", "{sys.query}"), ["begin"]),
    "UserFillUp:Ask": cpn("UserFillUp", ["LLM:Write"], {
        "tips": "Plan: {LLM:Plan@content}", "inputs": {"feedback": {"name": "feedback", "type": "line"}}},
        ["LLM:Plan"]),
    "LLM:Write": cpn("LLM", ["Message:Out"], llm("writer", "{UserFillUp:Ask@feedback}"), ["UserFillUp:Ask"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Write@content}"]}, ["LLM:Write"]),
}})


class Replica:
    def __init__(self, redis_url: str, llm_addr: str, log: Path, **extra_env: str) -> None:
        self.port = free_port()
        env = {**os.environ, "TRELLIS_REDIS_URL": redis_url, "TRELLIS_ORCHESTRATOR_PORT": str(self.port),
               "TRELLIS_ORCHESTRATOR_METRICS_PORT": "0", "TRELLIS_LLM_GATEWAY_ADDR": llm_addr,
               "TRELLIS_RETRIEVAL_ADDR": f"127.0.0.1:{free_port()}", "TRELLIS_SANDBOX_ADDR": f"127.0.0.1:{free_port()}",
               "TRELLIS_RUN_LEASE_S": str(LEASE_S), "TRELLIS_HOST": "127.0.0.1", "TRELLIS_DRAIN_S": "0", **extra_env}
        self.log_path = log
        self.log = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "services.orchestrator"], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = canvas_grpc.CanvasServiceStub(self.channel)

    async def wait_serving(self) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)

        async def serving() -> bool:
            assert self.proc.poll() is None, "orchestrator replica exited at start"
            resp = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
            return resp.status == health_pb2.HealthCheckResponse.SERVING

        # a hang, not a slow start on a loaded machine, fails this
        await eventually(serving, what="the orchestrator replica serving", timeout=90, ignoring=(grpc.aio.AioRpcError,))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def go_on(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    async def close(self) -> None:
        await self.channel.close()
        if self.proc.poll() is None:
            self.go_on()  # (a test that paused it and failed)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


@pytest.fixture
async def cluster(redis_server, tmp_path, request):
    extra_env = getattr(request, "param", {})  # (indirect parametrization: the replicas' environment)
    async with llm_gateway(SCRIPTS) as llm:
        replicas = [Replica(redis_server.url, llm.addr, tmp_path / f"orchestrator-{i}.log", **extra_env) for i in range(2)]
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        yield replicas, llm.scripted, llm.server
        for r in replicas:
            await r.close()


def calls(provider, model: str) -> int:
    return sum(1 for name, _ in provider.calls if name.startswith(model))


def answer(events) -> str:
    return "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta")


async def final_status(stub, run_id: str):
    async def ended():
        info = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=run_id), timeout=30)).run
        return info if info.status != "running" else None

    return await eventually(ended, what=f"the end of run {run_id}")


async def watch_to_end(stub, run_id: str, after: int = 0) -> list:
    request = canvas_pb.WatchRunRequest(tenant_id="t1", run_id=run_id, after_seq=after)
    return [e async for e in stub.WatchRun(request, timeout=60)]


async def killed_mid_stream(replica: Replica) -> list:
    """A two-LLM run on `replica`, killed -9 after its third answer delta: what its client saw."""
    seen = []
    with pytest.raises(grpc.aio.AioRpcError):  # the replica dies under the client
        async for event in replica.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=TWO_LLM_DSL, query="q"),
                                            timeout=60):
            seen.append(event)
            if sum(1 for e in seen if e.WhichOneof("kind") == "message_delta") == 3:
                replica.kill()
    return seen


async def taken_over(replica: Replica, run_id: str) -> None:
    async def second_attempt() -> bool:
        return (await replica.stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=run_id))).run.attempts >= 2

    await eventually(second_attempt, what=f"run {run_id} taken over")


async def test_kill_9_mid_stream_the_other_replica_resumes_and_a_rejoining_client_gets_it_once(cluster) -> None:
    (a, b), provider, _ = cluster
    seen = await killed_mid_stream(a)
    run_id, session_id = seen[0].run_id, seen[0].session_id
    assert calls(provider, "planner") == 1 and calls(provider, "slow") == 1

    # The client rejoins once the surviving replica has taken the run over (the half-sent output of the
    # interrupted component is dropped from the stream then; see docs/durability.md).
    await taken_over(b, run_id)
    whole = await watch_to_end(b.stub, run_id)
    assert whole[-1].WhichOneof("kind") == "run_finished" and whole[-1].run_finished.error == ""
    assert answer(whole) == SLOW_TEXT  # the whole answer, once
    assert [e.seq for e in whole] == sorted({e.seq for e in whole})
    started = [e.node_id for e in whole if e.WhichOneof("kind") == "node_started"]
    assert started == ["begin", "LLM:Plan", "LLM:Slow", "Message:Out"]  # each component once in the stream
    # what had started but not finished starts again, and says so (a client that saw part of it drops that)
    restarted = {e.node_id for e in whole if e.WhichOneof("kind") == "node_started" and e.node_started.restarted}
    assert "LLM:Slow" in restarted and not restarted & {"begin", "LLM:Plan"}
    assert calls(provider, "planner") == 1  # finished before the crash: never sent again
    assert calls(provider, "slow") == 2  # interrupted: sent again
    info = await final_status(b.stub, run_id)  # the turn is stored just after the last event
    assert info.status == "succeeded" and info.attempts == 2

    nxt = [e async for e in b.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=TWO_LLM_DSL, query="again",
                                                             session_id=session_id), timeout=60)]
    assert nxt[-1].run_finished.error == ""  # the session is free for the next turn


async def test_a_run_that_dies_before_its_journals_first_write_is_resumed_from_the_start(cluster, redis_client) -> None:
    """Its journal never reached Redis (under the `batched` journal policy the first write of a run may wait,
    services/common/speed_policies.py): nothing of the run is in Redis but its record. The other replica runs it
    again from the start, RunStarted included, under the same run id."""
    (a, b), provider, _ = cluster
    seen = await killed_mid_stream(a)
    run_id = seen[0].run_id
    # what such a crash leaves: the lease runs out only later, so no replica has taken the run over yet
    await redis_client.delete(keys.run_events("t1", run_id), keys.run_checkpoint("t1", run_id))
    await taken_over(b, run_id)
    whole = await watch_to_end(b.stub, run_id)
    assert [e.seq for e in whole] == sorted({e.seq for e in whole})
    assert whole[0].WhichOneof("kind") == "run_started" and whole[-1].run_finished.error == ""
    # The client saw events that were never stored: rejoining after the last of them, it misses none of the new.
    assert [e.seq for e in await watch_to_end(b.stub, run_id, after=seen[-1].seq)] == [e.seq for e in whole]
    assert answer(whole) == SLOW_TEXT
    started = [e.node_id for e in whole if e.WhichOneof("kind") == "node_started"]
    assert started == ["begin", "LLM:Plan", "LLM:Slow", "Message:Out"]
    assert calls(provider, "planner") == 2  # no checkpoint reached Redis: it ran again
    assert (await final_status(b.stub, run_id)).status == "succeeded"


GATEWAY_KEY = "failover-key"


async def test_a_paused_owner_resumes_after_a_take_over_and_its_writes_are_refused(cluster, redis_client) -> None:
    (a, b), provider, _ = cluster
    call = a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=TWO_LLM_DSL, query="q"), timeout=60)
    seen = []
    while sum(1 for e in seen if e.WhichOneof("kind") == "message_delta") < 3:
        seen.append(await call.read())
        assert seen[-1] is not grpc.aio.EOF, "the run ended before its third answer delta"
    a.pause()  # frozen mid-stream, its lease held: it renews nothing, writes nothing
    run_id, session_id = seen[0].run_id, seen[0].session_id
    try:
        await taken_over(b, run_id)

        async def cleaned_up() -> bool:  # the new owner dropped the interrupted component's events
            return await redis_client.hget(keys.run("t1", run_id), "resuming") == b""

        await eventually(cleaned_up, what=f"run {run_id} resumed by the other replica")
        before = {seq for seq, _ in await read_events(redis_client, "t1", run_id)}
    finally:
        a.go_on()  # its loop runs again: the LLM's buffered deltas, its journal, its heartbeat
    rest = []
    while (event := await call.read()) is not grpc.aio.EOF:
        rest.append(event)

    # Its caller got no error: the run's end, as the new owner wrote it, after the interrupted component's
    # restart notice and its whole output.
    assert rest[-1].WhichOneof("kind") == "run_finished" and rest[-1].run_finished.error == ""
    restart = next(i for i, e in enumerate(rest) if e.WhichOneof("kind") == "node_started"
                   and e.node_id == "LLM:Slow" and e.node_started.restarted)
    assert answer(rest[restart:]) == SLOW_TEXT
    info = await final_status(b.stub, run_id)
    assert info.status == "succeeded" and info.attempts == 2

    async def refused() -> bool:  # a write of its own told it so (its journal's, or its lease renewal)
        text = a.log_path.read_text(errors="replace")
        return re.search(rf"run {run_id}: [^\n]*refused: another replica took it over[^\n]*stopping here", text)

    await eventually(refused, what="the paused replica stopping for a refused write")
    # The stream has no event of the paused replica after the take-over (its own numbers are below the
    # take-over's gap; the new owner's above it), and each component's output once, for a client that rejoins.
    stored = [seq for seq, _ in await read_events(redis_client, "t1", run_id)]
    assert {seq for seq in stored if seq < TAKE_OVER_GAP} <= before
    whole = await watch_to_end(b.stub, run_id)
    assert answer(whole) == SLOW_TEXT
    assert [e.node_id for e in whole if e.WhichOneof("kind") == "node_started"] == [
        "begin", "LLM:Plan", "LLM:Slow", "Message:Out"]
    assert calls(provider, "planner") == 1 and calls(provider, "slow") == 2
    turn = (await SessionStore(redis_client).get("t1", session_id)).messages
    assert [m["content"] for m in turn] == ["q", SLOW_TEXT]  # one turn, the new owner's
    nxt = [e async for e in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=TWO_LLM_DSL, query="again",
                                                             session_id=session_id), timeout=60)]
    assert nxt[-1].run_finished.error == ""  # the paused replica serves again, the session is free


async def test_a_paused_owner_that_lost_the_run_calls_no_model_after_it(cluster) -> None:
    (a, b), provider, _ = cluster
    call = a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=SLOW_THEN_PLAN_DSL, query="q"), timeout=60)
    run_id = (await call.read()).run_id
    await eventually(lambda: calls(provider, "slow") == 1, what="the slow LLM's request")
    a.pause()  # frozen mid-stream (2 s long); the model server goes on sending the rest of the answer meanwhile
    try:
        await taken_over(b, run_id)
        info = await final_status(b.stub, run_id)  # the new owner ran everything, the fast LLM included
        assert info.status == "succeeded" and calls(provider, "planner") == 1
    finally:
        a.go_on()  # the slow answer's rest is there at once: its next component would start right away
    rest = []
    while (event := await call.read()) is not grpc.aio.EOF:
        rest.append(event)
    assert rest[-1].WhichOneof("kind") == "run_finished" and rest[-1].run_finished.error == ""
    # By its own clock its lease had lapsed: it asked Redis before starting the next component, was told the run
    # is another replica's, and stopped, so the model got the fast LLM's request once, from the new owner.
    assert calls(provider, "planner") == 1 and calls(provider, "slow") == 2
    # Its caller saw what it said of the slow LLM dropped (restarted) before the new owner's whole answer.
    restart = max(i for i, e in enumerate(rest) if e.WhichOneof("kind") == "node_started"
                  and e.node_id == "LLM:Slow" and e.node_started.restarted)
    assert answer(rest[restart:]) == "plan: search the web"


@pytest.fixture
async def gateway(cluster):
    """The HTTP gateway in front of both replicas (one channel, round_robin over the two addresses)."""
    (a, b), _, _ = cluster
    cfg = GatewayConfig(host="127.0.0.1", port=0, api_keys={GATEWAY_KEY: "t1"}, run_lease_s=LEASE_S,
                        upstreams={"orchestrator": f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}",
                                   **{name: f"127.0.0.1:{free_port()}" for name in ("llm_gateway", "retrieval", "sandbox")}})
    client = TestClient(TestServer(create_app(cfg), host="127.0.0.1"))
    await client.start_server()
    yield client
    await client.close()


async def sse_frames(resp):
    """(id, RAGFlow event) of each SSE frame as it comes; ends at [DONE] or when the connection breaks."""
    block: dict[str, str] = {}
    try:
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line:
                field, _, value = line.partition(":")
                block[field] = value.strip()
                continue
            if block.get("data") and block["data"] != "[DONE]":
                yield block.get("id", ""), json.loads(block["data"])
            block = {}
    except Exception:  # noqa: BLE001 (the replica died under the stream: what came is what the client has)
        return


class Screen:
    """What a RAGFlow UI shows: each component's output, dropped when the component starts again."""

    def __init__(self) -> None:
        self.output: dict[str, list[str]] = {}
        self.restarted: list[str] = []
        self.errors: list[str] = []

    def show(self, event: dict) -> None:
        data = event.get("data") or {}
        if event.get("code"):  # a RAGFlow error frame
            self.errors.append(event.get("message", ""))
        elif event["event"] == "node_started" and data.get("restarted"):
            self.restarted.append(data["component_id"])
            self.output.pop(data["component_id"], None)
        elif event["event"] == "node_started":
            self.output.setdefault(data["component_id"], [])
        elif event["event"] == "message":
            streaming = [node for node, text in self.output.items() if text is not None]
            self.output.setdefault(streaming[-1] if streaming else "", []).append(data.get("content", ""))

    def text(self) -> str:
        return "".join(t for texts in self.output.values() for t in texts)


async def owner_process(redis_client, replicas, run_id: str) -> Replica:
    owner = (await redis_client.get(keys.run_lease(run_id))).decode()
    return next(r for r in replicas if owner.split("-")[-2] == str(r.proc.pid))


async def test_kill_9_under_a_gateway_stream_the_rejoin_is_never_unavailable_and_sees_the_restart(
        cluster, gateway, redis_client) -> None:
    (a, b), provider, _ = cluster
    auth = {"Authorization": f"Bearer {GATEWAY_KEY}"}
    created = await (await gateway.post("/api/v1/agents", headers=auth,
                                        json={"title": "failover", "dsl": json.loads(TWO_LLM_DSL)})).json()
    agent_id = created["data"]["id"]
    body = {"agent_id": agent_id, "query": "q", "stream": True}
    screen, last_id, deltas = Screen(), "", 0
    killed: Replica | None = None
    resp = await gateway.post("/api/v1/agents/chat/completions", headers=auth, json=body)
    async for frame_id, event in sse_frames(resp):
        if killed is not None:
            break  # what the dying stream still says is not the point here
        screen.show(event)
        last_id = frame_id or last_id
        deltas += event.get("event") == "message"
        if deltas == 3:
            killed = await owner_process(redis_client, (a, b), last_id.rsplit(":", 1)[0])
            killed.kill()
    assert killed is not None and calls(provider, "slow") == 1
    survivor = b if killed is a else a

    # At once, before any replica took the run over: the rejoin waits for the new owner and goes on.
    rejoin = await gateway.post("/api/v1/agents/chat/completions", headers={**auth, "Last-Event-ID": last_id}, json=body)
    assert rejoin.status == 200
    events = [event async for _, event in sse_frames(rejoin)]
    for event in events:
        screen.show(event)
    assert screen.errors == []  # never "the orchestrator is unavailable"
    assert "unavailable" not in json.dumps(events)
    assert events[-1]["event"] == "workflow_finished"
    assert "LLM:Slow" in screen.restarted  # announced before its new output...
    assert screen.text() == SLOW_TEXT  # ...so the screen shows the whole answer once
    info = await final_status(survivor.stub, last_id.rsplit(":", 1)[0])
    assert info.status == "succeeded" and info.attempts == 2


async def test_kill_9_while_waiting_for_the_user_then_answer_on_the_other_replica(cluster) -> None:
    (a, b), provider, _ = cluster
    first = [e async for e in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=FILL_UP_DSL, query="q"), timeout=60)]
    assert first[-1].run_finished.waiting_for_user
    a.kill()
    second = [e async for e in b.stub.Run(canvas_pb.RunRequest(
        tenant_id="t1", dsl_json=FILL_UP_DSL, session_id=first[0].session_id,
        inputs_json=json.dumps({"feedback": "yes"})), timeout=60)]
    assert answer(second) == "final answer for yes"
    assert calls(provider, "planner") == 1


async def test_redis_restarting_mid_run_loses_nothing_stored(cluster, redis_server) -> None:
    (a, b), _, _ = cluster
    first = [e async for e in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=FILL_UP_DSL, query="earlier"),
                                          timeout=60)]
    session_id = first[0].session_id  # a stored turn, acknowledged before Redis restarts
    events = []
    async for event in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=TWO_LLM_DSL, query="q"), timeout=120):
        events.append(event)
        if len(events) == 8:
            await asyncio.to_thread(redis_server.restart)
    # The client's stream ends: finished, failed naming Redis, or (when the restart outlasted the run's lease
    # and the other replica took it over) told that the run moved.
    assert events[-1].WhichOneof("kind") == "run_finished"
    info = await final_status(b.stub, events[0].run_id)
    assert info.status in ("succeeded", "failed") and info.started_at > 0
    stored = await watch_to_end(b.stub, events[0].run_id)  # the run's stream, to its end, from any replica
    assert [e.seq for e in stored] == sorted({e.seq for e in stored})
    final = stored[-1].run_finished
    assert final.error == "" or "Redis" in final.error
    if info.status == "succeeded":
        assert answer(stored) == SLOW_TEXT  # every token once
    assert (await b.stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=first[0].run_id))).run.status \
        == "waiting_for_user"  # what was stored before the restart is still there
    runs = (await b.stub.ListRuns(canvas_pb.ListRunsRequest(tenant_id="t1", session_id=session_id))).runs
    assert [r.run_id for r in runs] == [first[0].run_id]


async def test_llm_gateway_gone_mid_call_fails_the_run_naming_it(cluster) -> None:
    (a, _), _, llm_server = cluster
    events = []
    async for event in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=TWO_LLM_DSL, query="q"), timeout=120):
        events.append(event)
        if event.WhichOneof("kind") == "message_delta" and len(events) < 100:
            await llm_server.stop(None)
    assert events[-1].WhichOneof("kind") == "run_finished"
    assert "llm" in events[-1].run_finished.error.lower()


@pytest.mark.parametrize("component, params, service", [
    ("CodeExec", {"lang": "python", "script": "def main():\n    return {'result': 1}\n",
                  "outputs": {"result": {"type": "Number"}}}, "sandbox"),
    ("Retrieval", {"kb_ids": ["kb1"], "query": "sys.query"}, "retrieval"),
])
async def test_a_peer_service_that_is_down_fails_the_run_naming_it(cluster, component, params, service) -> None:
    (a, _), _, _ = cluster  # the replicas' sandbox and retrieval addresses are closed ports
    dsl = json.dumps({"components": {
        "begin": cpn("Begin", [f"{component}:X"]),
        f"{component}:X": cpn(component, [], params, ["begin"]),
    }})
    events = [e async for e in a.stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=dsl, query="q"), timeout=120)]
    assert events[-1].WhichOneof("kind") == "run_finished"
    error = events[-1].run_finished.error
    assert error.startswith(f"{component}:X") and service in error.lower()
