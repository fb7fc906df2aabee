"""Schedules and completion webhooks: protobuf messages to the triggers' records and back (the only code of
triggers that sees `_pb2`)."""

from __future__ import annotations

import json
from typing import Any

from trellis.canvas.v1 import schedule_service_pb2 as sched_pb
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb

from services.common.json_fields import json_object
from services.orchestrator.store.schedules import ScheduleConfig, ScheduleRecord
from services.orchestrator.triggers.webhooks_out import webhook_config

# ScheduleFields that map one to one onto ScheduleConfig
_PLAIN = ("cron", "timezone", "end_at", "enabled", "query", "version_id", "draft", "overlap", "catch_up", "user_id")


def webhook_from_proto(hook: hook_pb.CompletionWebhook, source: str, *, make_secret: bool = False) -> dict[str, Any]:
    """A checked webhook; `source` (request, agent, schedule) says where it was set."""
    return {**webhook_config(hook.url, list(hook.events), hook.secret, make_secret=make_secret), "source": source}


def webhook_to_proto(hook: dict[str, Any] | None, *, with_secret: bool = False) -> hook_pb.CompletionWebhook | None:
    if not hook:
        return None
    return hook_pb.CompletionWebhook(url=hook["url"], events=hook.get("events", []),
                                     secret=hook["secret"] if with_secret else "")


def apply_fields(config: ScheduleConfig, fields: sched_pb.ScheduleFields) -> tuple[set[str], str]:
    """Sets on `config` what `fields` sets: (the names changed, the webhook secret made here or "")."""
    changed, secret = set(), ""
    for name in _PLAIN:
        if fields.HasField(name):
            setattr(config, name, getattr(fields, name))
            changed.add(name)
    if fields.HasField("inputs_json"):
        config.inputs = json_object(fields.inputs_json, "inputs_json")
        changed.add("inputs")
    if fields.HasField("webhook"):
        changed.add("webhook")
        if not fields.webhook.url:
            config.webhook = None
        else:
            config.webhook = webhook_config(fields.webhook.url, list(fields.webhook.events), fields.webhook.secret,
                                            make_secret=True)
            if not fields.webhook.secret:
                secret = config.webhook["secret"]
    return changed, secret


def schedule_to_proto(record: ScheduleRecord) -> sched_pb.Schedule:
    c = record.config
    return sched_pb.Schedule(
        id=record.id, agent_id=c.agent_id, cron=c.cron, timezone=c.timezone, end_at=c.end_at, enabled=c.enabled,
        query=c.query, inputs_json=json.dumps(c.inputs, ensure_ascii=False) if c.inputs else "",
        version_id=c.version_id, draft=c.draft, overlap=c.overlap, catch_up=c.catch_up,
        webhook=webhook_to_proto(c.webhook), user_id=c.user_id, created_at=c.created_at, updated_at=c.updated_at,
        next_fire_at=record.next_fire_at, last_run_id=record.last_run_id, last_fired_at=record.last_fired_at,
        pending=bool(record.pending_tick))


def delivery_to_proto(d: dict[str, Any]) -> hook_pb.Delivery:
    return hook_pb.Delivery(
        id=d["id"], event=d["event"], url=d["url"], source=d.get("source", ""), state=d["state"],
        next_attempt_at=d.get("next_attempt_at", 0),
        attempts=[hook_pb.DeliveryAttempt(at=a["at"], status_code=a.get("status_code", 0), error=a.get("error", ""))
                  for a in d.get("attempts", [])])
