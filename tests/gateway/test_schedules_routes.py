"""The schedule and completion webhook routes in front of the real orchestrator (test Redis): RAGFlow's envelope,
each field through to ScheduleService / WebhookService and back."""

from __future__ import annotations

import uuid

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from tests.support.waiting import eventually

KEY = "sched-key"


@pytest.fixture
async def gateway(orchestrator_addr, stack):
    cfg = stack.config(api_keys={KEY: f"sched-{uuid.uuid4().hex[:8]}"},
                       upstreams={**stack.config().upstreams, "orchestrator": orchestrator_addr})
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    yield client
    await client.close()


async def call(client: TestClient, method: str, path: str, **kw) -> dict:
    resp = await client.request(method, path, headers={"Authorization": f"Bearer {KEY}"}, **kw)
    return await resp.json()


DSL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Message:Out"], "upstream": []},
    "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["got {sys.query}"]}},
                    "downstream": [], "upstream": ["begin"]}}}


async def test_schedules_over_http(gateway):
    agent = await call(gateway, "POST", "/api/v1/agents", json={"title": "Sched", "dsl": DSL})
    agent_id = agent["data"]["id"]
    base = f"/api/v1/agents/{agent_id}/schedules"
    created = await call(gateway, "POST", base, json={
        "cron": "0 9 1 1 *", "timezone": "Europe/Paris", "query": "q", "draft": True, "overlap": "cancel",
        "webhook": {"url": "https://example.com/hook", "events": ["run.failed"]}})
    assert created["code"] == 0, created
    s = created["data"]
    assert s["cron"] == "0 9 1 1 *" and s["timezone"] == "Europe/Paris" and s["overlap"] == "cancel"
    assert s["webhook"] == {"url": "https://example.com/hook", "events": ["run.failed"]}
    assert s["webhook_secret"].startswith("whsec_") and s["next_fire_at"] > 0
    assert (await call(gateway, "GET", base))["data"][0]["id"] == s["id"]
    patched = await call(gateway, "PATCH", f"{base}/{s['id']}", json={"enabled": False, "query": "r"})
    assert patched["data"]["enabled"] is False and patched["data"]["next_fire_at"] is None
    assert "webhook_secret" not in patched["data"]
    assert (await call(gateway, "GET", f"{base}/{s['id']}"))["data"]["query"] == "r"

    fired = await call(gateway, "POST", f"{base}/{s['id']}/trigger")
    run_id = fired["data"]["run_id"]
    assert run_id and not fired["data"]["skipped"]

    async def ended():
        run = (await call(gateway, "GET", f"/api/v1/agents/{agent_id}/runs/{run_id}"))["data"]
        return run if run["status"] != "running" else None

    assert (await eventually(ended, what="the triggered run"))["status"] == "succeeded"
    deliveries = await call(gateway, "GET", f"/api/v1/agents/{agent_id}/runs/{run_id}/deliveries")
    assert deliveries == {"code": 0, "message": "success", "data": []}  # the webhook wants run.failed only

    bad = await call(gateway, "POST", base, json={"cron": "every minute"})
    assert bad["code"] != 0 and "5 fields" in bad["message"]
    assert (await call(gateway, "DELETE", f"{base}/{s['id']}"))["data"] is True
    assert (await call(gateway, "GET", f"{base}/{s['id']}"))["code"] != 0


async def test_an_agents_completion_webhook_over_http(gateway):
    agent_id = (await call(gateway, "POST", "/api/v1/agents", json={"title": "Hooked", "dsl": DSL}))["data"]["id"]
    path = f"/api/v1/agents/{agent_id}/completion_webhook"
    made = await call(gateway, "PUT", path, json={"url": "https://example.com/done"})
    assert made["code"] == 0 and made["data"]["secret"].startswith("whsec_")
    assert len(made["data"]["events"]) == 4
    read = await call(gateway, "GET", path)
    assert read["data"] == {"url": "https://example.com/done", "events": made["data"]["events"]}
    refused = await call(gateway, "PUT", path, json={"url": "ftp://example.com", "secret": "whsec_AAAA"})
    assert refused["code"] != 0
    assert (await call(gateway, "DELETE", path))["data"] is True
    assert (await call(gateway, "GET", path))["code"] != 0
