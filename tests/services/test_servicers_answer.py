"""Every servicer starts on port 0 through the common helper, answers health and reflection, and an RPC that a
later issue implements says so with UNIMPLEMENTED and a message naming it."""

from __future__ import annotations

import grpc
import pytest
from helpers import health_status, reflected_services
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.common.server import Binding
from services.common.testing import start_server
from services.orchestrator.server import AgentServicer, SessionServicer
from services.retrieval.server import RetrievalServicer

CASES = [
    (
        Binding(rr_grpc.add_RetrievalServiceServicer_to_server, RetrievalServicer(), "trellis.retrieval.v1.RetrievalService"),
        lambda ch: rr_grpc.RetrievalServiceStub(ch).Search(rr_pb.SearchRequest(query="q"), timeout=5),
        "RetrievalService.Search",
    ),
    (
        Binding(agent_grpc.add_AgentServiceServicer_to_server, AgentServicer(), "trellis.canvas.v1.AgentService"),
        lambda ch: agent_grpc.AgentServiceStub(ch).ListAgents(agent_pb.ListAgentsRequest(), timeout=5),
        "AgentService.ListAgents",
    ),
    (
        Binding(session_grpc.add_SessionServiceServicer_to_server, SessionServicer(), "trellis.canvas.v1.SessionService"),
        lambda ch: session_grpc.SessionServiceStub(ch).GetSession(session_pb.GetSessionRequest(), timeout=5),
        "SessionService.GetSession",
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
