"""Completion webhooks with real processes: an orchestrator replica (subprocess) and a receiver (a real HTTP
server in this process) that verifies every delivery with the `standardwebhooks` package.

- a run with a webhook on its request: the receiver fails the first delivery, the retry carries the same
  webhook-id, a fresh signature that verifies, and the attempts (500, then 200) are on the run API;
- an agent's webhook and a schedule's: each gets its own delivery of the same run's end, events filtered;
- a receiver on a private address is refused by the SSRF guard (not retried) unless allow-listed;
- a run ended without its engine is notified too: cancelled while it waits for the user, failed because it
  could not be resumed after its owner died (`RunStore.finish`).
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from aiohttp import web
from standardwebhooks import Webhook
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import schedule_service_pb2 as sched_pb
from trellis.canvas.v1 import schedule_service_pb2_grpc as sched_grpc
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb
from trellis.canvas.v1 import webhook_service_pb2_grpc as hook_grpc

from services.orchestrator.triggers.webhooks_out import new_secret
from tests.e2e.test_run_failover import TWO_LLM_DSL, Replica, cluster, cpn  # noqa: F401 (a fixture)
from tests.e2e.test_schedules import ECHO_DSL, TENANT, Cluster
from tests.support.net import free_port
from tests.support.waiting import eventually

FAST_RETRIES = {"TRELLIS_WEBHOOK_POLL_S": "0.05", "TRELLIS_WEBHOOK_RETRY_BASE_S": "0.05"}


class Receiver:
    """Answers each delivery with the next status of `statuses` (then 200); keeps what it verified."""

    def __init__(self, secret: str, statuses: list[int]) -> None:
        self.webhook = Webhook(secret)
        self.statuses = list(statuses)
        self.received: list[tuple[dict[str, str], dict]] = []  # (headers, verified payload)
        self.arrived = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        payload = self.webhook.verify(body, headers)  # raises on a bad signature
        self.received.append((headers, payload))
        self.arrived.set()
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200)


@pytest.fixture
async def receiver_server():
    runners = []

    async def start(receiver: Receiver) -> str:
        app = web.Application()
        app.router.add_post("/hook", receiver.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{port}/hook"

    yield start
    for runner in runners:
        await runner.cleanup()


async def replica(redis_server, tmp_path, **env) -> Replica:
    r = Replica(redis_server.url, f"127.0.0.1:{free_port()}", tmp_path / "orch.log", **{**FAST_RETRIES, **env})
    await r.wait_serving()
    return r


async def run_inline(stub, hook: hook_pb.CompletionWebhook, query: str = "hi") -> str:
    request = canvas_pb.RunRequest(dsl_json=ECHO_DSL, tenant_id=TENANT, query=query, completion_webhook=hook)
    events = [e async for e in stub.Run(request, timeout=60)]
    return events[0].run_id


async def deliveries(channel, run_id: str, *, until) -> list:
    stub = hook_grpc.WebhookServiceStub(channel)

    async def check():
        got = (await stub.ListRunDeliveries(hook_pb.ListRunDeliveriesRequest(tenant_id=TENANT, run_id=run_id))).deliveries
        return got if until(got) else None

    return await eventually(check, what=f"the deliveries of run {run_id}")


async def test_a_failed_delivery_is_retried_with_the_same_id_and_a_valid_signature(redis_server, tmp_path,
                                                                                  receiver_server):
    secret = new_secret()
    receiver = Receiver(secret, [500])
    url = await receiver_server(receiver)
    orch = await replica(redis_server, tmp_path, TRELLIS_SSRF_ALLOWLIST="127.0.0.1")
    try:
        run_id = await run_inline(canvas_grpc.CanvasServiceStub(orch.channel),
                                  hook_pb.CompletionWebhook(url=url, secret=secret, events=["run.succeeded"]))
        found = await deliveries(orch.channel, run_id, until=lambda d: d and d[0].state == "delivered")
    finally:
        await orch.close()
    (delivery,) = found
    assert [a.status_code for a in delivery.attempts] == [500, 200]
    assert delivery.attempts[0].error and not delivery.attempts[1].error
    assert delivery.event == "run.succeeded" and delivery.source == "request" and delivery.url == url
    assert len(receiver.received) == 2
    ids = {headers["webhook-id"] for headers, _ in receiver.received}
    assert ids == {delivery.id}  # the receiver can deduplicate on it
    payload = receiver.received[1][1]
    assert payload["type"] == "run.succeeded"
    assert payload["data"]["run_id"] == run_id and payload["data"]["status"] == "succeeded"
    assert receiver.received[0][1] == payload  # the same body every attempt


async def test_agent_and_schedule_webhooks_each_get_a_delivery(redis_server, redis_client, tmp_path,
                                                               receiver_server):
    agent_secret, schedule_secret = new_secret(), new_secret()
    agent_receiver, schedule_receiver = Receiver(agent_secret, []), Receiver(schedule_secret, [])
    agent_url, schedule_url = await receiver_server(agent_receiver), await receiver_server(schedule_receiver)
    schedules = Cluster(redis_server.url, redis_client, tmp_path)
    await schedules.set_clock(1893456030)
    schedules.started = 0
    orch = await replica(redis_server, tmp_path, TRELLIS_SSRF_ALLOWLIST="127.0.0.1",
                         TRELLIS_SCHEDULER_CLOCK_KEY=schedules.clock_key, TRELLIS_SCHEDULER_POLL_S="0.05")
    schedules.replicas = [orch]
    try:
        agent_id = await schedules.agent(ECHO_DSL)
        hooks = hook_grpc.WebhookServiceStub(orch.channel)
        await hooks.SetAgentWebhook(hook_pb.SetAgentWebhookRequest(
            tenant_id=TENANT, agent_id=agent_id, webhook=hook_pb.CompletionWebhook(url=agent_url, secret=agent_secret)))
        read = await hooks.GetAgentWebhook(hook_pb.GetAgentWebhookRequest(tenant_id=TENANT, agent_id=agent_id))
        assert read.webhook.url == agent_url and read.webhook.secret == ""  # never read back
        s = await schedules.schedule(agent_id, query="tick", webhook=hook_pb.CompletionWebhook(
            url=schedule_url, secret=schedule_secret, events=["run.succeeded", "run.failed"]))
        fired = await schedules.fires(agent_id, s.id, int(s.next_fire_at))
        found = await deliveries(orch.channel, fired.last_run_id,
                                 until=lambda d: len(d) == 2 and all(x.state == "delivered" for x in d))
        # a schedule's webhook made without a secret: one is made and returned once
        made = await sched_grpc.ScheduleServiceStub(orch.channel).UpdateSchedule(sched_pb.UpdateScheduleRequest(
            tenant_id=TENANT, agent_id=agent_id, schedule_id=s.id,
            fields=sched_pb.ScheduleFields(webhook=hook_pb.CompletionWebhook(url=schedule_url))))
        assert made.webhook_secret.startswith("whsec_") and made.schedule.webhook.secret == ""
    finally:
        await orch.close()
    assert {d.source for d in found} == {"agent", "schedule"}
    assert len({d.id for d in found}) == 2
    (_, from_schedule), = schedule_receiver.received
    assert from_schedule["data"]["schedule_id"] == s.id and from_schedule["data"]["run_id"] == fired.last_run_id
    (_, from_agent), = agent_receiver.received
    assert from_agent["data"]["agent_id"] == agent_id


async def test_a_private_receiver_is_refused_by_the_ssrf_guard(redis_server, tmp_path, receiver_server):
    secret = new_secret()
    receiver = Receiver(secret, [])
    url = await receiver_server(receiver)
    orch = await replica(redis_server, tmp_path)  # no allow-list: 127.0.0.1 is private
    try:
        run_id = await run_inline(canvas_grpc.CanvasServiceStub(orch.channel),
                                  hook_pb.CompletionWebhook(url=url, secret=secret))
        found = await deliveries(orch.channel, run_id, until=lambda d: d and d[0].state == "failed")
    finally:
        await orch.close()
    (delivery,) = found
    (attempt,) = delivery.attempts  # not retried
    assert attempt.status_code == 0 and "refused to reach" in attempt.error
    assert receiver.received == []


async def test_a_request_webhook_needs_a_secret(redis_server, tmp_path):
    import grpc

    orch = await replica(redis_server, tmp_path)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await run_inline(canvas_grpc.CanvasServiceStub(orch.channel),
                             hook_pb.CompletionWebhook(url="http://example.com/hook"))
    finally:
        await orch.close()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# Runs ended without their engine (RunStore.finish) get their notice too: cancelled while waiting for the user,
# failed because they could not be resumed after their owner died.
ASK_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["UserFillUp:Ask"]),
    "UserFillUp:Ask": cpn("UserFillUp", ["Message:Out"], {
        "tips": "Which city?", "inputs": {"city": {"name": "city", "type": "line"}}}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["Going to {UserFillUp:Ask@city}"]}, ["UserFillUp:Ask"]),
}})

async def test_a_run_cancelled_while_it_waits_for_the_user_is_notified(redis_server, tmp_path, receiver_server):
    secret = new_secret()
    receiver = Receiver(secret, [])
    url = await receiver_server(receiver)
    orch = await replica(redis_server, tmp_path, TRELLIS_SSRF_ALLOWLIST="127.0.0.1")
    try:
        stub = canvas_grpc.CanvasServiceStub(orch.channel)
        hook = hook_pb.CompletionWebhook(url=url, secret=secret, events=["run.waiting_for_user", "run.cancelled"])
        request = canvas_pb.RunRequest(dsl_json=ASK_DSL, tenant_id=TENANT, query="q", completion_webhook=hook)
        events = [e async for e in stub.Run(request, timeout=60)]
        assert events[-1].run_finished.waiting_for_user
        run_id = events[0].run_id
        await stub.Cancel(canvas_pb.CancelRequest(tenant_id=TENANT, run_id=run_id), timeout=10)
        found = await deliveries(orch.channel, run_id,
                                 until=lambda d: len(d) == 2 and all(x.state == "delivered" for x in d))
    finally:
        await orch.close()
    assert sorted(d.event for d in found) == ["run.cancelled", "run.waiting_for_user"]
    cancelled = next(p for _, p in receiver.received if p["type"] == "run.cancelled")
    assert cancelled["data"]["run_id"] == run_id and cancelled["data"]["status"] == "cancelled"


@pytest.mark.parametrize("cluster", [{"TRELLIS_RUN_MAX_ATTEMPTS": "1", "TRELLIS_SSRF_ALLOWLIST": "127.0.0.1",
                                      **FAST_RETRIES}], indirect=True)
async def test_a_run_that_cannot_be_resumed_after_its_owner_died_is_notified(cluster, receiver_server):  # noqa: F811
    (a, b), _, _ = cluster
    secret = new_secret()
    receiver = Receiver(secret, [])
    url = await receiver_server(receiver)
    hook = hook_pb.CompletionWebhook(url=url, secret=secret, events=["run.failed"])
    seen = []
    with pytest.raises(grpc.aio.AioRpcError):  # a dies under the client
        async for event in a.stub.Run(canvas_pb.RunRequest(tenant_id=TENANT, dsl_json=TWO_LLM_DSL, query="q",
                                                           completion_webhook=hook), timeout=60):
            seen.append(event)
            if event.WhichOneof("kind") == "message_delta":
                a.kill()
    run_id = seen[0].run_id
    # b takes it over (attempt 2 of at most 1): it fails it with the reason, and its webhook hears of it
    found = await deliveries(b.channel, run_id, until=lambda d: d and d[0].state == "delivered")
    assert [d.event for d in found] == ["run.failed"]
    (payload,) = [p for _, p in receiver.received]
    assert payload["data"]["status"] == "failed" and payload["data"]["error"].startswith("cannot resume")


# ---- the HTTP completion routes: `completion_webhook` {url, events, secret} in the body -----------------------

@pytest.fixture
async def http_stack(redis_server):
    from services.orchestrator.triggers.settings import TriggerSettings
    from tests.support.trigger_stack import trigger_stack

    async with trigger_stack(redis_server.url, triggers=TriggerSettings(webhook_poll_s=0.05)) as stack:
        yield stack


ECHO_CANVAS = json.loads(ECHO_DSL)


async def http_deliveries(s, agent_id: str, run_id: str) -> list[dict]:
    async def check():
        got = (await s.call("GET", f"/api/v1/agents/{agent_id}/runs/{run_id}/deliveries"))["data"]
        return got if got and all(d["state"] == "delivered" for d in got) else None

    return await eventually(check, what=f"the deliveries of run {run_id}")


@pytest.mark.parametrize("route", ["ragflow", "openai", "envelope"])
async def test_a_completion_route_takes_a_webhook_in_its_body(http_stack, receiver_server, route):
    s = http_stack
    secret = new_secret()
    receiver = Receiver(secret, [])
    hook = {"url": await receiver_server(receiver), "secret": secret, "events": ["run.succeeded"]}
    agent_id = await s.create(ECHO_CANVAS)
    if route == "ragflow":
        answer = await s.call("POST", "/api/v1/agents/chat/completions",
                              json={"agent_id": agent_id, "query": "hi", "completion_webhook": hook})
        assert answer["code"] == 0, answer
    elif route == "openai":
        answer = await s.call("POST", "/v1/chat/completions", json={
            "model": agent_id, "messages": [{"role": "user", "content": "hi"}], "completion_webhook": hook})
        assert answer["object"] == "chat.completion", answer
    else:
        resp = await s.client.post(f"/api/v1/agents/{agent_id}/stream", headers=s.auth(),
                                   json={"query": "hi", "completion_webhook": hook})
        assert resp.status == 200
        types = [json.loads(line[5:])["type"] for line in (await resp.text()).splitlines() if line.startswith("data:")]
        assert types[-1] == "done" and "error" not in types
    await receiver.arrived.wait()
    ((headers, payload),) = receiver.received  # verified with the secret sent in the body
    run_id = payload["data"]["run_id"]
    assert payload["type"] == "run.succeeded" and payload["data"]["agent_id"] == agent_id
    (delivery,) = await http_deliveries(s, agent_id, run_id)
    assert delivery["source"] == "request" and delivery["id"] == headers["webhook-id"]


@pytest.mark.parametrize(("hook", "field", "says"), [
    ({"url": "http://example.com/hook"}, "completion_webhook.secret", "is required"),
    ({"url": "ftp://example.com/hook", "secret": "whsec_c2VjcmV0"}, "completion_webhook.url", "http(s) URL"),
    ({"url": "http://example.com/hook", "secret": "whsec_c2VjcmV0", "events": ["run.done"]},
     "completion_webhook.events.0", "run.succeeded"),
    ({"url": "http://example.com/hook", "secret": "plain"}, "completion_webhook.secret", "whsec_"),
])
async def test_a_bad_webhook_in_a_body_is_refused_naming_the_field(http_stack, hook, field, says):
    s = http_stack
    agent_id = await s.create(ECHO_CANVAS)
    ragflow = await s.call("POST", "/api/v1/agents/chat/completions",
                           json={"agent_id": agent_id, "query": "hi", "completion_webhook": hook})
    assert ragflow["code"] != 0 and f"`{field}`" in ragflow["message"] and says in ragflow["message"]
    resp = await s.client.post("/v1/chat/completions", headers=s.auth(), json={
        "model": agent_id, "messages": [{"role": "user", "content": "hi"}], "completion_webhook": hook})
    error = (await resp.json())["error"]
    assert resp.status == 400 and error["param"] == field and says in error["message"]
    resp = await s.client.post(f"/api/v1/agents/{agent_id}/stream", headers=s.auth(),
                               json={"query": "hi", "completion_webhook": hook})
    assert resp.status == 400 and field in (await resp.json())["data"]["message"]
