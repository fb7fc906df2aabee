"""common.serve plumbing: health, reflection, error mapping, request ids and metrics on a real server."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import redis.exceptions
from prometheus_client import REGISTRY
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.common import context as ctxvars
from services.common.channels import open_channel, outbound_metadata
from services.common.errors import NotFound
from services.common.server import Binding
from services.common.testing import start_server
from tests.support.net import health_status, reflected_services

SERVICE = "trellis.retrieval.v1.RetrievalService"


class ProbeServicer(rr_grpc.RetrievalServiceServicer):
    """Each RPC exercises one path through the interceptors."""

    seen_request_ids: list[str] = []

    async def Search(self, request, context):
        self.seen_request_ids.append(ctxvars.request_id.get())
        if request.query == "missing":
            raise NotFound("dataset 'kb-1' not found")
        if request.query == "boom":
            raise RuntimeError("secret internal detail")
        if request.query == "store-down":
            raise redis.exceptions.ConnectionError("Error 111 connecting to 10.0.0.7:6379. Connection refused.")
        return rr_pb.SearchResponse(total=len(request.query))


@pytest.fixture
async def channel():
    server, port = await start_server([Binding(rr_grpc.add_RetrievalServiceServicer_to_server, ProbeServicer(), SERVICE)])
    ch = open_channel(f"127.0.0.1:{port}")
    yield ch
    await ch.close()
    await server.stop(None)


async def test_health_serving_for_server_and_service(channel):
    assert await health_status(channel) == "SERVING"
    assert await health_status(channel, SERVICE) == "SERVING"


async def test_reflection_lists_the_service_and_health(channel):
    names = await reflected_services(channel)
    assert SERVICE in names
    assert "grpc.health.v1.Health" in names


async def test_service_error_maps_to_its_status_with_message(channel):
    stub = rr_grpc.RetrievalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Search(rr_pb.SearchRequest(query="missing"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "dataset 'kb-1' not found"


async def test_unexpected_error_is_internal_and_sanitized(channel):
    stub = rr_grpc.RetrievalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Search(rr_pb.SearchRequest(query="boom"), timeout=5)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in err.value.details()
    assert "Search" in err.value.details()


async def test_a_store_that_is_down_is_unavailable_and_worth_a_retry(channel):
    stub = rr_grpc.RetrievalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Search(rr_pb.SearchRequest(query="store-down"), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "Redis" in err.value.details() and "Search" in err.value.details()
    assert "10.0.0.7" not in err.value.details()


async def test_unimplemented_rpc_says_so(channel):
    stub = rr_grpc.RetrievalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ListDatasets(rr_pb.ListDatasetsRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_request_id_crosses_the_hop(channel):
    stub = rr_grpc.RetrievalServiceStub(channel)
    token = ctxvars.request_id.set("req-abc-123")
    try:
        await stub.Search(rr_pb.SearchRequest(query="x"), timeout=5, metadata=outbound_metadata())
    finally:
        ctxvars.request_id.reset(token)
    await stub.Search(rr_pb.SearchRequest(query="y"), timeout=5, metadata=outbound_metadata())
    assert ProbeServicer.seen_request_ids[-2] == "req-abc-123"
    assert len(ProbeServicer.seen_request_ids[-1]) == 32  # a fresh id when the caller sent none


async def test_metrics_count_rpcs_by_code_and_skip_probes(channel):
    method = f"/{SERVICE}/Search"

    def count(code: str) -> float:
        return REGISTRY.get_sample_value("trellis_grpc_requests_total", {"service": "test", "method": method, "code": code}) or 0.0

    ok_before, nf_before = count("OK"), count("NOT_FOUND")
    stub = rr_grpc.RetrievalServiceStub(channel)
    await stub.Search(rr_pb.SearchRequest(query="ok"), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Search(rr_pb.SearchRequest(query="missing"), timeout=5)
    await health_status(channel)
    assert count("OK") == ok_before + 1
    assert count("NOT_FOUND") == nf_before + 1
    errors = REGISTRY.get_sample_value("trellis_grpc_errors_total", {"service": "test", "method": method, "code": "NOT_FOUND"})
    assert errors and errors >= 1
    health_total = REGISTRY.get_sample_value(
        "trellis_grpc_requests_total", {"service": "test", "method": "/grpc.health.v1.Health/Check", "code": "OK"}
    )
    assert health_total is None
    latency = REGISTRY.get_sample_value("trellis_grpc_request_seconds_count", {"service": "test", "method": method})
    assert latency and latency >= 2


async def test_concurrent_calls_keep_their_own_request_ids(channel):
    stub = rr_grpc.RetrievalServiceStub(channel)

    async def call(rid: str) -> None:
        ctxvars.request_id.set(rid)
        await stub.Search(rr_pb.SearchRequest(query=rid), timeout=5, metadata=outbound_metadata())

    ids = [f"rid-{i}" for i in range(20)]
    start = len(ProbeServicer.seen_request_ids)
    await asyncio.gather(*(asyncio.create_task(call(r)) for r in ids))
    assert sorted(ProbeServicer.seen_request_ids[start:]) == sorted(ids)
