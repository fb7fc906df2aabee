"""One request id follows an HTTP request into the services: taken from X-Request-Id (or made), sent as gRPC
metadata, and echoed on the response."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common import context as ctxvars
from services.common.server import Binding
from services.common.testing import start_server
from tests.support.net import free_port


class RecordingAgents(agent_grpc.AgentServiceServicer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def ListAgents(self, request, context):
        self.seen.append(ctxvars.request_id.get())
        return agent_pb.ListAgentsResponse()


async def test_request_id_reaches_the_orchestrator_and_comes_back():
    agents = RecordingAgents()
    server, port = await start_server([Binding(agent_grpc.add_AgentServiceServicer_to_server, agents, "trellis.canvas.v1.AgentService")])
    nowhere = f"127.0.0.1:{free_port()}"
    cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0, api_keys={"k": "tenant"},
                        upstreams={"orchestrator": f"127.0.0.1:{port}", "llm_gateway": nowhere, "retrieval": nowhere, "sandbox": nowhere})
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    try:
        resp = await client.get("/api/v1/agents", headers={"Authorization": "Bearer k", "X-Request-Id": "req-from-client-1"})
        assert (await resp.json())["code"] == 0
        assert resp.headers["X-Request-Id"] == "req-from-client-1" and agents.seen[-1] == "req-from-client-1"
        resp = await client.get("/api/v1/agents", headers={"Authorization": "Bearer k"})
        made = resp.headers["X-Request-Id"]
        assert len(made) == 32 and agents.seen[-1] == made
    finally:
        await client.close()
        await server.stop(None)
