"""The deliverer's fan-out is batched: many run ends without any webhook cost a few round trips per pass, whatever
their number, and leave no delivery and no key behind; at least once still holds (a claimed notice not fanned
out is claimed again after its lease)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from services.orchestrator.store import keys
from services.orchestrator.store.outbox import Outbox, queue_notice
from services.orchestrator.triggers import webhooks_out
from services.orchestrator.triggers.settings import TriggerSettings
from services.orchestrator.triggers.webhooks_out import WebhookDeliverer
from tests.support.redis_round_trips import count_round_trips

RUNS = 200


@pytest.fixture
def tenant() -> str:
    return f"fan-{uuid.uuid4().hex[:8]}"


async def ended_agent_runs(redis, tenant: str, count: int) -> list[str]:
    """`count` ended runs of an agent without any webhook, each with its notice, as a run's end leaves them."""
    run_ids = [uuid.uuid4().hex for _ in range(count)]
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for i, run_id in enumerate(run_ids):
            pipe.hset(keys.run(tenant, run_id), mapping={
                "session_id": f"s{i}", "agent_id": "agent-1", "status": "succeeded", "started_at": now,
                "finished_at": now, "error": "", "parent_run_id": "", "spec": json.dumps({"agent_id": "agent-1"})})
            queue_notice(pipe, tenant, run_id, "succeeded")
        await pipe.execute()
    return run_ids


async def tenant_keys(redis, tenant: str) -> set[bytes]:
    return {k async for k in redis.scan_iter(match=f"t:{tenant}:*")}


async def test_many_run_ends_without_webhooks_fan_out_in_a_few_round_trips(redis_client, tenant, monkeypatch):
    await redis_client.delete(keys.WEBHOOK_NOTICES, keys.WEBHOOK_DUE)
    deliverer = WebhookDeliverer(Outbox(redis_client), None, TriggerSettings())  # type: ignore[arg-type]
    assert await deliverer.step() == 0  # its scripts are in Redis now (a first call may have to load them)
    run_ids = await ended_agent_runs(redis_client, tenant, RUNS)
    before = await tenant_keys(redis_client, tenant)
    sent = count_round_trips(monkeypatch)
    assert await deliverer.step() == RUNS  # one pass: claim, the runs, their agent's webhook, the writes, the due
    assert len(sent) <= 5
    sent.clear()
    assert await deliverer.step() == 0
    assert len(sent) == 2  # the two claims, nothing else
    assert await redis_client.zcard(keys.WEBHOOK_NOTICES) == 0
    assert await redis_client.zcard(keys.WEBHOOK_DUE) == 0
    assert await tenant_keys(redis_client, tenant) == before  # no deliveries, nothing stored for a push
    assert len(before) == len(run_ids)


async def test_more_notices_than_a_pass_takes_are_fanned_out_over_bounded_passes(redis_client, tenant, monkeypatch):
    await redis_client.delete(keys.WEBHOOK_NOTICES, keys.WEBHOOK_DUE)
    monkeypatch.setattr(webhooks_out, "NOTICE_BATCH", 50)
    await ended_agent_runs(redis_client, tenant, RUNS)
    deliverer = WebhookDeliverer(Outbox(redis_client), None, TriggerSettings())  # type: ignore[arg-type]
    handled = [await deliverer.step() for _ in range(RUNS // 50 + 1)]
    assert handled == [50, 50, 50, 50, 0]
    assert await redis_client.zcard(keys.WEBHOOK_NOTICES) == 0


class Receiver:
    """An OutboundHttp that answers 200 and keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def request(self, method, url, *, data, headers, timeout_s):
        self.sent.append(url)
        return type("Response", (), {"status": 200})()


async def test_a_notice_whose_fan_out_failed_is_claimed_again_after_its_lease(redis_client, tenant, monkeypatch):
    await redis_client.delete(keys.WEBHOOK_NOTICES, keys.WEBHOOK_DUE)
    [run_id] = await ended_agent_runs(redis_client, tenant, 1)
    await Outbox(redis_client).set_agent_webhook(tenant, "agent-1", {
        "url": "http://example.com/hook", "events": ["run.succeeded"], "secret": webhooks_out.new_secret()})
    receiver = Receiver()
    deliverer = WebhookDeliverer(Outbox(redis_client), receiver, TriggerSettings())  # type: ignore[arg-type]

    async def fails(notices):
        raise ConnectionError("the replica dies mid fan-out")

    monkeypatch.setattr(deliverer.outbox, "add_deliveries", fails)
    with pytest.raises(ConnectionError):
        await deliverer.step()
    monkeypatch.undo()
    assert await deliverer.step() == 0  # still claimed
    [(member, lease)] = await redis_client.zrange(keys.WEBHOOK_NOTICES, 0, -1, withscores=True)
    assert lease > time.time() + webhooks_out.NOTICE_LEASE_S - 5
    await redis_client.zadd(keys.WEBHOOK_NOTICES, {member: lease - webhooks_out.NOTICE_LEASE_S - 1})  # its lease over
    assert await deliverer.step() == 2  # the notice fanned out, its delivery made
    [delivery] = await Outbox(redis_client).run_deliveries(tenant, run_id)
    assert (delivery["source"], delivery["event"], delivery["state"]) == ("agent", "run.succeeded", "delivered")
    assert receiver.sent == ["http://example.com/hook"]
    assert await redis_client.zcard(keys.WEBHOOK_NOTICES) == 0
