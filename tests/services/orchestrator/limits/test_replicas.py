"""Limits across replicas that die, with real processes: two orchestrators (subprocesses) share one Redis, one
llm_gateway (in this process, scripted) and one limits file. `kill -9` of a replica running a tenant's run: its
leases of the tenant's slots expire, and the survivor takes the run over and runs it even past the tenant's limit
(it was admitted already; the survivor's lease counts it), while the survivor's new runs of that tenant are
refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.store import keys
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[4]
LEASE_S = 1.0
# Runs that talk for a minute: they are still running whatever the machine's pace (the test cancels them).
SCRIPTS = {"chat": {"long": {"turns": [{"reply": " ".join(f"w{i}" for i in range(1200)), "chunk_delay_s": 0.05}]}}}


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


def talking(model: str) -> str:
    return json.dumps({"components": {
        "begin": cpn("Begin", ["LLM:Talk"]),
        "LLM:Talk": cpn("LLM", ["Message:Out"], {"llm_id": f"{model}@Scripted", "sys_prompt": "S.",
                                                  "prompts": [{"role": "user", "content": "{sys.query}"}]}, ["begin"]),
        "Message:Out": cpn("Message", [], {"content": ["{LLM:Talk@content}"]}, ["LLM:Talk"]),
    }})


ECHO = json.dumps({"components": {"begin": cpn("Begin", ["Message:Out"]),
                                  "Message:Out": cpn("Message", [], {"content": ["{sys.query}"]}, ["begin"])}})


class Replica:
    def __init__(self, redis_url: str, llm_addr: str, limits_file: Path, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "TRELLIS_REDIS_URL": redis_url, "TRELLIS_ORCHESTRATOR_PORT": str(self.port),
               "TRELLIS_ORCHESTRATOR_METRICS_PORT": "0", "TRELLIS_LLM_GATEWAY_ADDR": llm_addr,
               "TRELLIS_RETRIEVAL_ADDR": f"127.0.0.1:{free_port()}", "TRELLIS_SANDBOX_ADDR": f"127.0.0.1:{free_port()}",
               "TRELLIS_RUN_LEASE_S": str(LEASE_S), "TRELLIS_HOST": "127.0.0.1", "TRELLIS_DRAIN_S": "0",
               "TRELLIS_LIMITS_FILE": str(limits_file)}
        self.log = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "services.orchestrator"], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = canvas_grpc.CanvasServiceStub(self.channel)

    @property
    def owner_prefix(self) -> str:
        """How its leases name it in Redis (app.py: host, pid, a random suffix)."""
        return f"{socket.gethostname()}-{self.proc.pid}-"

    async def wait_serving(self) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)

        async def serving() -> bool:
            assert self.proc.poll() is None, "orchestrator replica exited at start"
            resp = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
            return resp.status == health_pb2.HealthCheckResponse.SERVING

        await eventually(serving, what="the orchestrator replica serving", timeout=90, ignoring=(grpc.aio.AioRpcError,))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    async def close(self) -> None:
        await self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


@pytest.fixture
def tenant() -> str:
    return f"acme-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def replicas(redis_server, tmp_path, tenant):
    limits_file = tmp_path / "limits.yaml"
    limits_file.write_text(yaml.safe_dump({"tenants": {tenant: {"concurrent_runs": 2}}}))
    async with llm_gateway(SCRIPTS) as llm:
        pair = [Replica(redis_server.url, llm.addr, limits_file, tmp_path / f"orchestrator-{i}.log") for i in range(2)]
        try:
            await asyncio.gather(*(r.wait_serving() for r in pair))
            yield pair, limits_file
        finally:
            for r in pair:
                await r.close()


class Admitted(str):
    """What a run that was not refused for concurrency got instead (falsy, for `eventually`'s report)."""

    def __bool__(self) -> bool:
        return False


async def refused_for_concurrency(stub, tenant: str, limit: int) -> bool | Admitted:
    try:
        [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id=tenant, dsl_json=ECHO, query="q"), timeout=30)]
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and f"limit of {limit} concurrent runs" in exc.details():
            return True
        return Admitted(f"{exc.code().name}: {exc.details()}")
    return Admitted("admitted")


async def test_a_dead_replicas_leases_expire_and_its_run_is_taken_over_past_the_limit(replicas, tenant,
                                                                                     redis_client):
    (dying, survivor), limits_file = replicas
    lease_key = keys.limit_leases(tenant, "runs", "tenant")
    # One run of the tenant on each replica (its limit is 2); the survivor's keeps talking for a minute.
    long_call = survivor.stub.Run(canvas_pb.RunRequest(tenant_id=tenant, dsl_json=talking("long"), query="q"),
                                  timeout=120)
    assert (await long_call.read()).WhichOneof("kind") == "run_started"
    doomed = dying.stub.Run(canvas_pb.RunRequest(tenant_id=tenant, dsl_json=talking("long"), query="q",
                                                 continue_on_disconnect=True), timeout=60)
    first = await doomed.read()
    run_id = first.run_id
    leases = {k.decode(): v.decode() for k, v in (await redis_client.hgetall(lease_key)).items()}
    assert any(owner.startswith(dying.owner_prefix) for owner in leases), leases

    # The limit goes down to 1 (the replicas read the file again), then the replica running `run_id` dies.
    limits_file.write_text(yaml.safe_dump({"tenants": {tenant: {"concurrent_runs": 1}}}))
    await eventually(lambda: refused_for_concurrency(survivor.stub, tenant, 1), what="the lower limit read")
    dying.kill()
    doomed.cancel()

    async def dead_lease_gone() -> bool:  # the survivor's next lease drops the expired one
        owners = [k.decode() for k in await redis_client.hkeys(lease_key)]
        return not any(owner.startswith(dying.owner_prefix) for owner in owners)

    await eventually(dead_lease_gone, what="the dead replica's lease expiring")

    async def ended() -> canvas_pb.RunInfo | None:
        info = (await survivor.stub.GetRun(canvas_pb.GetRunRequest(tenant_id=tenant, run_id=run_id))).run
        return info if info.status not in ("running", "") else None

    async def taken_over() -> bool:
        info = (await survivor.stub.GetRun(canvas_pb.GetRunRequest(tenant_id=tenant, run_id=run_id))).run
        return info.attempts >= 2

    await eventually(taken_over, what="the dead replica's run taken over")
    # Two runs of the tenant on the survivor now, its limit 1: it holds both slots (the taken-over run counts),
    # new runs are refused, and the taken-over one runs to its end.
    async def survivor_holds_two() -> bool:
        held = {k.decode(): v.decode() for k, v in (await redis_client.hgetall(lease_key)).items()}
        return any(o.startswith(survivor.owner_prefix) and v.startswith("2:") for o, v in held.items())

    await eventually(survivor_holds_two, what="the survivor's lease counting the taken-over run")
    assert await refused_for_concurrency(survivor.stub, tenant, 1)
    assert (await survivor.stub.Cancel(canvas_pb.CancelRequest(tenant_id=tenant, run_id=run_id))).cancelled
    info = await eventually(ended, what="the taken-over run's end")
    assert info.status == "cancelled" and info.attempts == 2  # it ran on the survivor until cancelled there
    long_call.cancel()
