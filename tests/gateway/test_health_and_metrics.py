"""Gateway basics: /healthz reflects every upstream's gRPC health; /metrics exposes Prometheus text."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common.testing import start_server
from tests.support.net import free_port

UPSTREAMS = ["orchestrator", "llm_gateway", "retrieval", "sandbox"]


async def _client(addresses: dict[str, str]) -> TestClient:
    cfg = GatewayConfig(host="127.0.0.1", port=0, upstreams=addresses, health_timeout_s=1.0)
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    return client


async def test_healthz_is_200_when_all_serving_and_503_naming_the_one_down():
    servers = {name: await start_server([]) for name in UPSTREAMS}  # health alone is what /healthz reads
    client = await _client({name: f"127.0.0.1:{port}" for name, (_, port) in servers.items()})
    try:
        resp = await client.get("/healthz")
        body = await resp.json()
        assert resp.status == 200, body
        assert body["upstreams"] == {name: "SERVING" for name in UPSTREAMS}

        await servers["sandbox"][0].stop(None)
        resp = await client.get("/healthz")
        body = await resp.json()
        assert resp.status == 503
        assert body["failing"] == ["sandbox"]
        assert body["upstreams"]["sandbox"].startswith("UNREACHABLE")
        assert body["upstreams"]["retrieval"] == "SERVING"
    finally:
        await client.close()
        for server, _ in servers.values():
            await server.stop(None)


async def test_healthz_503_when_nothing_listens():
    client = await _client({name: f"127.0.0.1:{free_port()}" for name in UPSTREAMS})
    try:
        resp = await client.get("/healthz")
        assert resp.status == 503
        assert sorted((await resp.json())["failing"]) == sorted(UPSTREAMS)
    finally:
        await client.close()


async def test_metrics_exposes_http_and_grpc_families():
    client = await _client({name: f"127.0.0.1:{free_port()}" for name in UPSTREAMS})
    try:
        await client.get("/no-such-route")
        resp = await client.get("/metrics")
        text = await resp.text()
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert "trellis_http_requests_total" in text
        assert 'status="404"' in text
    finally:
        await client.close()
