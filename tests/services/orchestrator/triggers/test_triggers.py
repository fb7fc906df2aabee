"""The triggers' pure parts and their Redis claims: cron ticks in a time zone with an end, settings refused with
the field named, a due schedule claimed by one caller only, the outbox's fan-out idempotent, backoff bounds."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from services.common.errors import InvalidArgument
from services.orchestrator.store.schedules import ScheduleConfig, ScheduleStore
from services.orchestrator.triggers.schedules import check, next_tick
from services.orchestrator.triggers.settings import TriggerSettings
from services.orchestrator.triggers.webhooks_out import WebhookDeliverer, delivery_id, webhook_config


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_ticks_follow_the_time_zone_and_stop_at_the_end():
    paris = ScheduleConfig(agent_id="a", cron="0 9 * * *", timezone="Europe/Paris")
    assert next_tick(paris, ts("2030-01-01T00:00:00+00:00")) == ts("2030-01-01T08:00:00+00:00")  # CET
    assert next_tick(paris, ts("2030-07-01T00:00:00+00:00")) == ts("2030-07-01T07:00:00+00:00")  # CEST
    paris.end_at = ts("2030-01-01T12:00:00+00:00")
    assert next_tick(paris, ts("2030-01-01T09:00:00+00:00")) == 0
    paris.end_at, paris.enabled = 0, False
    assert next_tick(paris, ts("2030-01-01T00:00:00+00:00")) == 0


@pytest.mark.parametrize("field,value,named", [("cron", "* * * * * *", "5 fields"), ("cron", "61 * * * *", "5 fields"),
                                               ("timezone", "Mars/Olympus", "time zone"), ("overlap", "queue", "overlap"),
                                               ("catch_up", "all", "catch_up")])
def test_bad_settings_are_refused_naming_them(field, value, named):
    config = ScheduleConfig(agent_id="a", cron="* * * * *")
    setattr(config, field, value)
    with pytest.raises(InvalidArgument, match=named):
        check(config)


def test_webhook_configs():
    made = webhook_config("https://x.example/h", [], "", make_secret=True)
    assert made["secret"].startswith("whsec_") and len(made["events"]) == 4
    with pytest.raises(InvalidArgument, match="secret"):
        webhook_config("https://x.example/h", [], "", make_secret=False)
    with pytest.raises(InvalidArgument, match="events"):
        webhook_config("https://x.example/h", ["run.done"], made["secret"], make_secret=False)
    assert delivery_id("r", "run.failed", "agent", "u") == delivery_id("r", "run.failed", "agent", "u")
    assert delivery_id("r", "run.failed", "agent", "u") != delivery_id("r", "run.failed", "request", "u")


def test_backoff_grows_is_capped_and_jittered():
    deliverer = WebhookDeliverer(None, None, TriggerSettings(webhook_retry_base_s=10, webhook_retry_max_s=3600))  # type: ignore[arg-type]
    for attempts, base in [(1, 10), (2, 20), (5, 160), (40, 3600)]:
        assert base * 0.5 <= deliverer.backoff(attempts) <= base
    # at least a day of retries with the defaults
    assert TriggerSettings().webhook_retry_for_s >= 24 * 3600


async def test_a_due_schedule_is_claimed_by_one_caller_and_a_tick_fired_once(redis_client):
    store = ScheduleStore(redis_client)
    record = await store.create("t-claims", ScheduleConfig(agent_id="a", cron="* * * * *"), next_fire_at=1000)
    claims = await asyncio.gather(*(store.claim_due(1001, 60) for _ in range(5)))
    assert sum(("t-claims", record.id) in c for c in claims) == 1
    ticks = await asyncio.gather(*(store.claim_tick("t-claims", record.id, 1000) for _ in range(5)))
    assert ticks.count(True) == 1
    assert await store.advance("t-claims", record.id, "next_fire_at", 1000, 1060, last_run_id="x")
    assert not await store.advance("t-claims", record.id, "next_fire_at", 1000, 1120)  # already moved
    assert not await store.claim_tick("t-claims", record.id, 1000)  # no longer the schedule's tick
    got = await store.find("t-claims", record.id)
    assert (got.next_fire_at, got.last_run_id) == (1060, "x")
    await store.delete("t-claims", "a", record.id)
