"""The real application registers every API family: a dataset call reaches its handler, not the 404 catch-all."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from tests.support.net import free_port


async def test_dataset_routes_are_registered_in_the_app():
    nowhere = f"127.0.0.1:{free_port()}"
    cfg = GatewayConfig(host="127.0.0.1", port=0, upstreams={n: nowhere for n in ("orchestrator", "llm_gateway", "retrieval", "sandbox")},
                        health_timeout_s=1.0, api_keys={"k": "tenant"})
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    try:
        body = await (await client.get("/api/v1/datasets", headers={"Authorization": "Bearer k"})).json()
        assert body["code"] != 0 and "Not Found" not in body["message"]  # the retrieval service is down
        body = await (await client.get("/api/v1/nope", headers={"Authorization": "Bearer k"})).json()
        assert body["message"] == "Not Found: /api/v1/nope"
    finally:
        await client.close()
