"""Every servicer starts on port 0 through the common helper, answers health and reflection, and an RPC that a
later issue implements says so with UNIMPLEMENTED and a message naming it."""

from __future__ import annotations

import grpc
import pytest
from helpers import health_status, reflected_services
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.common.server import Binding
from services.common.testing import start_server
from services.retrieval.server import RetrievalServicer

CASES = [
    (
        Binding(rr_grpc.add_RetrievalServiceServicer_to_server, RetrievalServicer(), "trellis.retrieval.v1.RetrievalService"),
        lambda ch: rr_grpc.RetrievalServiceStub(ch).Search(rr_pb.SearchRequest(query="q"), timeout=5),
        "RetrievalService.Search",
    ),
]


@pytest.mark.parametrize("binding,call,rpc", CASES, ids=[c[2] for c in CASES])
async def test_servicer_serves_health_reflection_and_clear_unimplemented(binding, call, rpc):
    server, port = await start_server([binding])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert await health_status(ch, binding.service_name) == "SERVING"
            assert binding.service_name in await reflected_services(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(ch)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert rpc in err.value.details() and "issue" in err.value.details()
    finally:
        await server.stop(None)
