"""CanvasService/GetTenantAdmission through two real orchestrator replicas on one real Redis: runs admitted,
refused, running and waiting on both, and their LLM tokens, are summed for the tenant asked about whichever
replica answers, and another tenant's never appear in them; a replica that stops drops out of the sums."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from tests.services.orchestrator.limits.test_tenant_limits import (
    LLM,
    TOKENS_SCRIPTS,
    Holding,
    refused,
    run_all,
    write_limits,
)
from tests.support.orchestrator import orchestrator
from tests.support.waiting import eventually


@pytest.fixture
def tenants() -> tuple[str, str]:
    run = uuid.uuid4().hex[:8]
    return f"acme-{run}", f"other-{run}"


async def figures(stub, tenant: str) -> canvas_pb.GetTenantAdmissionResponse:
    return await stub.GetTenantAdmission(canvas_pb.GetTenantAdmissionRequest(tenant_id=tenant), timeout=10)


def summary(found: canvas_pb.GetTenantAdmissionResponse) -> dict:
    return {"admitted": found.admitted, "refused": found.refused, "refused_by_limit": dict(found.refused_by_limit),
            "running": found.running, "waiting": found.waiting, "llm_tokens": found.llm_tokens,
            "llm_tokens_last_minute": found.llm_tokens_last_minute, "replicas": found.replicas}


async def model_run(stub, tenant: str) -> None:
    events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id=tenant, dsl_json=LLM, query="q"), timeout=30)]
    assert events[-1].run_finished.error == ""


@pytest.mark.parametrize("llm", [{"chat": {"big": TOKENS_SCRIPTS["chat"]["big"] * 5}}], indirect=True)
async def test_either_replica_answers_the_sums_of_both_for_that_tenant_only(redis_server, tmp_path, tenants, llm):
    acme, other = tenants
    path = tmp_path / "limits.yaml"
    # One run at a time per replica; acme two runs at once over both; a waiting run may wait long.
    write_limits(path, {"tenants": {acme: {"concurrent_runs": 2, "tokens_per_minute": 100000}},
                        "capacity": {"runs": 1, "max_wait_s": 600}})
    async with AsyncExitStack() as stack:
        stubs, services = [], []
        for _ in range(2):
            orch = await stack.enter_async_context(orchestrator(redis_server.url, limits_file=str(path),
                                                                llm_gateway_addr=llm.addr))
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(orch.addr))
            stubs.append(canvas_grpc.CanvasServiceStub(channel))
            services.append(orch)
        for stub in stubs:  # on each replica: a model run of each tenant (700 tokens each)
            await model_run(stub, acme)
            await model_run(stub, other)
        holdings = [await Holding(stub, acme).started() for stub in stubs]  # acme's two: each replica is full
        for stub in stubs:
            err = await refused(stub, acme)
            assert "at its limit of 2 concurrent runs" in err.details()
        waiting = asyncio.ensure_future(model_run(stubs[0], other))  # waits for the first replica's slot

        acme_now = {"admitted": 4, "refused": 2, "refused_by_limit": {"concurrent_runs": 2}, "running": 2,
                    "waiting": 0, "llm_tokens": 1400, "llm_tokens_last_minute": 1400, "replicas": 2}
        other_now = {"admitted": 2, "refused": 0, "refused_by_limit": {}, "running": 0, "waiting": 1,
                     "llm_tokens": 1400, "llm_tokens_last_minute": 1400, "replicas": 2}
        for stub in stubs:
            await eventually(lambda: _is(stub, acme, acme_now), what="acme's figures summed over both replicas")
            await eventually(lambda: _is(stub, other, other_now), what="the other tenant's, apart")
        found = await figures(stubs[1], acme)
        assert found.limits.concurrent_runs == 2 and found.limits.tokens_per_minute == 100000
        assert not found.limits.HasField("held_streams") and not found.limits.HasField("runs_per_second")
        assert found.limits.weight == 1 and found.limits.priority == 0
        assert not (await figures(stubs[1], other)).limits.HasField("concurrent_runs")

        for holding in holdings:
            await holding.release()
        await waiting  # admitted once the first replica's slot was free
        acme_after = dict(acme_now, running=0)
        other_after = dict(other_now, admitted=3, waiting=0, llm_tokens=2100, llm_tokens_last_minute=2100)
        await eventually(lambda: _is(stubs[1], acme, acme_after), what="acme's runs ended, counted")
        await eventually(lambda: _is(stubs[1], other, other_after), what="the waiting run admitted, counted")


async def _is(stub, tenant: str, expected: dict) -> bool:
    return summary(await figures(stub, tenant)) == expected


async def test_a_stopped_replicas_figures_drop_out_and_an_empty_tenant_is_refused(redis_server, tmp_path, tenants):
    acme, _ = tenants

    async with orchestrator(redis_server.url) as first:
        async with grpc.aio.insecure_channel(first.addr) as channel:
            stub = canvas_grpc.CanvasServiceStub(channel)
            async with orchestrator(redis_server.url) as second:
                async with grpc.aio.insecure_channel(second.addr) as other_channel:
                    await run_all(canvas_grpc.CanvasServiceStub(other_channel), acme)
                await run_all(stub, acme)
                await eventually(lambda: _admitted(stub, acme, 2, replicas=2), what="both replicas' runs")
            await eventually(lambda: _admitted(stub, acme, 1, replicas=1), timeout=60,
                             what="the stopped replica's figures expired")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await figures(stub, "")
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "tenant_id is required" in err.value.details()


async def _admitted(stub, tenant: str, n: int, *, replicas: int) -> bool:
    found = await figures(stub, tenant)
    return found.admitted == n and found.replicas == replicas
