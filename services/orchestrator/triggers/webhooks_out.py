"""Completion webhooks: a run's end POSTed to the URLs that asked for it, signed as Standard Webhooks specifies.

Where a webhook is set: on the request (RunSpec.completion_webhook, source "request"), on the schedule that
fired the run (the same field, source "schedule") and on the agent (store/outbox.py, source "agent"). Each that
wants the run's event gets its own delivery. A run's end queues a notice in the round trip that stores it
(runs/ending.py); every replica runs a `WebhookDeliverer`, which:

1. claims notices, up to `NOTICE_BATCH` at a time, and turns them into their runs' deliveries (ids derived
   from run, event and target) in a few round trips whatever their number (store/outbox.py);
2. claims due deliveries and POSTs each through the orchestrator's OutboundHttp (the SSRF guard: a private
   address is refused unless allow-listed, and such a refusal is not retried), with the headers `webhook-id`
   (the delivery's id, the same on every attempt: receivers deduplicate on it), `webhook-timestamp` and
   `webhook-signature` (v1, HMAC-SHA256 of "<id>.<timestamp>.<body>" with the webhook's secret);
3. records every attempt on the run (time, status code or error) and, when it failed, schedules the next with
   exponential backoff and jitter until `webhook_retry_for_s` (26 h by default) has passed.

A task's A2A push-notification configs are completion webhooks too, with the A2A payload (triggers/a2a_push.py):
their deliveries (`kind` "a2a", source "a2a") go through the same steps; only the body (the A2A Task) and the
headers (X-A2A-Notification-Token, Authorization) differ.

A claim is a lease: a replica that dies mid-attempt leaves the delivery to another after it, so a delivery is
made at least once (and, in that case, possibly twice with the same id).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import random
import secrets
import time
from datetime import datetime, timezone
from typing import Any

import aiohttp
from standardwebhooks import Webhook
from yarl import URL

from services.common.errors import InvalidArgument
from services.orchestrator.egress.http import EgressBlocked, OutboundHttp
from services.orchestrator.store import keys
from services.orchestrator.store.outbox import Outbox
from services.orchestrator.store.push_configs import PushConfigStore
from services.orchestrator.triggers import a2a_push
from services.orchestrator.triggers.settings import TriggerSettings

log = logging.getLogger(__name__)

EVENTS = ("run.succeeded", "run.failed", "run.waiting_for_user", "run.cancelled")
NOTICE_LEASE_S = 30.0
NOTICE_BATCH = 500  # notices fanned out per pass: their reads and their writes are one round trip each


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def webhook_config(url: str, events: list[str] | tuple[str, ...], secret: str, *, make_secret: bool) -> dict[str, Any]:
    """A checked webhook {url, events, secret}. Without a secret, one is made when `make_secret` (an agent's or a
    schedule's: returned once to whoever set it), else refused (a request's: nobody could verify it)."""
    parsed = URL(url or "")
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidArgument(f"webhook url {url!r} must be an http(s) URL with a host")
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise InvalidArgument(f"unknown webhook events {unknown}: use {', '.join(EVENTS)}")
    if not secret:
        if not make_secret:
            raise InvalidArgument("a completion webhook needs a secret (whsec_ + base64) to sign its deliveries")
        secret = new_secret()
    try:
        Webhook(secret)
    except Exception:
        raise InvalidArgument("webhook secret must be 'whsec_' followed by base64") from None
    return {"url": url, "events": list(dict.fromkeys(events)) or list(EVENTS), "secret": secret}


def delivery_id(run_id: str, event: str, source: str, url: str) -> str:
    """The same for the same run, event and target: fanning a notice out twice makes no second delivery."""
    return "msg_" + hashlib.sha256(f"{run_id}|{event}|{source}|{url}".encode()).hexdigest()[:32]


def public_view(delivery: dict[str, Any]) -> dict[str, Any]:
    """A delivery as the run API shows it: never its secret, token, credentials or body."""
    return {k: v for k, v in delivery.items() if k not in ("secret", "body", "token", "auth_credentials")}


class WebhookDeliverer:
    def __init__(self, outbox: Outbox, http: OutboundHttp, settings: TriggerSettings) -> None:
        self.outbox = outbox
        self.http = http
        self.settings = settings
        self._task: asyncio.Task | None = None

    @property
    def push_configs(self) -> PushConfigStore:
        """The A2A push-notification configs, beside the outbox (triggers/a2a_push.py)."""
        return PushConfigStore(self.outbox.redis)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="webhook-deliverer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        while True:
            try:
                busy = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook deliverer: a step failed; trying again")
                busy = 0
            if not busy:
                await asyncio.sleep(self.settings.webhook_poll_s)

    async def step(self) -> int:
        """One pass: due notices fanned out, due deliveries attempted. How many were handled."""
        notices = await self.outbox.claim(keys.WEBHOOK_NOTICES, NOTICE_LEASE_S, NOTICE_BATCH)
        if notices:
            await self._fan_out(notices)
        due = await self.outbox.claim(keys.WEBHOOK_DUE, self.settings.webhook_timeout_s + 30)
        await asyncio.gather(*(self._attempt(tenant, run_id, d_id) for tenant, run_id, d_id in due))
        return len(notices) + len(due)

    async def _fan_out(self, claimed: list[list[str]]) -> None:
        """Claimed notices turned into their runs' deliveries: the runs' records, then their agents' webhooks and
        their tasks' push configs (a run that resumed another first reads its chain), then what the pushes carry
        (only for runs with configs), each read for all notices at once; then every delivery is written and the
        notices dropped at once. A notice that fails stays claimed: it is fanned out again after its lease."""
        notices = []
        for notice in claimed:
            try:
                tenant, run_id, status = notice
                keys.run(tenant, run_id)
            except Exception:  # not a notice of ours: never fanned out, and never claimed again
                log.error("webhook deliverer: dropping the malformed notice %r", "/".join(notice))
                await self.outbox.drop(keys.WEBHOOK_NOTICES, "/".join(notice))
                continue
            notices.append((tenant, run_id, status))
        runs = await self.outbox.run_records([(tenant, run_id) for tenant, run_id, _ in notices])
        pushed = [i for i, (_, _, status) in enumerate(notices) if runs[i] and status in a2a_push.STATES]
        tasks = await self._tasks_of([(notices[i][0], notices[i][1], runs[i]) for i in pushed])
        task_of = dict(zip(pushed, tasks))
        agents = [(tenant, runs[i]["agent_id"]) for i, (tenant, _, status) in enumerate(notices)
                  if runs[i].get("agent_id") and f"run.{status}" in EVENTS]
        hooks, configs = await self.outbox.hooks_and_configs(
            agents, [(notices[i][0], task_of[i]) for i in pushed])
        with_configs = [i for i in pushed if (notices[i][0], task_of[i]) in configs]
        turns = await self.push_configs.turns([
            (notices[i][0], notices[i][1], runs[i].get("session_id", ""), notices[i][2] == "waiting_for_user")
            for i in with_configs])
        turn_of = dict(zip(with_configs, turns))
        now = time.time()
        done = []
        for i, (tenant, run_id, status) in enumerate(notices):
            try:
                run = runs[i]
                deliveries = self._webhooks(run_id, run, status, hooks.get((tenant, run.get("agent_id", ""))), now)
                if i in turn_of:
                    task_id = task_of[i]
                    end = a2a_push.run_end(run_id, run.get("session_id", ""), *turn_of[i])
                    deliveries += self._a2a_pushes(run_id, run, status, task_id, configs[tenant, task_id], end, now)
            except Exception:
                log.exception("webhook deliverer: run %s's notice could not be fanned out; it will be again", run_id)
                continue
            done.append((tenant, run_id, status, deliveries))
        await self.outbox.add_deliveries(done)

    @staticmethod
    def _webhooks(run_id: str, run: dict[str, str], status: str, agent_hook: dict[str, Any] | None,
                  now: float) -> list[dict[str, Any]]:
        """A delivery of the run's end to each completion webhook that wants it: the request's (or schedule's)
        and the agent's."""
        event = f"run.{status}"
        hooks: list[dict[str, Any]] = []
        if run and event in EVENTS:
            spec = json.loads(run.get("spec") or "{}")
            if spec.get("completion_webhook"):
                hooks.append(spec["completion_webhook"])
            if run.get("agent_id") and agent_hook:
                hooks.append({**agent_hook, "source": "agent"})
        deliveries = []
        for hook in hooks:
            if event not in (hook.get("events") or EVENTS):
                continue
            source = hook.get("source", "request")
            data = {"run_id": run_id, "agent_id": run.get("agent_id", ""), "session_id": run.get("session_id", ""),
                    "status": status, "error": run.get("error") or None,
                    "started_at": float(run.get("started_at") or 0), "finished_at": float(run.get("finished_at") or 0)}
            if hook.get("schedule_id"):
                data["schedule_id"] = hook["schedule_id"]
            body = {"type": event, "timestamp": datetime.fromtimestamp(now, timezone.utc).isoformat(), "data": data}
            deliveries.append({
                "id": delivery_id(run_id, event, source, hook["url"]), "event": event, "url": hook["url"],
                "source": source, "secret": hook["secret"], "body": json.dumps(body, separators=(",", ":")),
                "created_at": now, "state": "pending", "next_attempt_at": now, "attempts": []})
        return deliveries

    async def _tasks_of(self, runs: list[tuple[str, str, dict[str, str]]]) -> list[str]:
        """The A2A task of each run [(tenant, run id, record)]: the first run of its chain (parents in the same
        session, of the same agent). One round trip per level of the longest chain, for all runs at once."""
        tasks = [run_id for _, run_id, _ in runs]
        current = [run for _, _, run in runs]
        pending = [i for i, run in enumerate(current) if run.get("parent_run_id")]
        for _ in range(1000):
            if not pending:
                break
            parents = await self.outbox.run_records([(runs[i][0], current[i]["parent_run_id"]) for i in pending])
            following = []
            for i, parent in zip(pending, parents):
                run = current[i]
                if not parent or parent.get("session_id") != run.get("session_id") or (
                        parent.get("agent_id") != run.get("agent_id")):
                    continue
                tasks[i], current[i] = run["parent_run_id"], parent
                if parent.get("parent_run_id"):
                    following.append(i)
            pending = following
        return tasks

    @staticmethod
    def _a2a_pushes(run_id: str, run: dict[str, str], status: str, task_id: str, configs: list[dict[str, Any]],
                    end: dict[str, Any], now: float) -> list[dict[str, Any]]:
        """A delivery of the run's end to each push-notification config of its task, in the A2A shape."""
        event = f"run.{status}"
        body = json.dumps(a2a_push.task_body(task_id, run_id, run, status, end), ensure_ascii=False,
                          separators=(",", ":"))
        return [{"id": delivery_id(run_id, event, f"{a2a_push.SOURCE}:{c['id']}", c["url"]), "kind": "a2a",
                 "event": event, "url": c["url"], "source": a2a_push.SOURCE, "task_id": task_id,
                 "config_id": c["id"], "token": c.get("token", ""), "auth_scheme": c.get("auth_scheme", ""),
                 "auth_credentials": c.get("auth_credentials", ""), "body": body, "created_at": now,
                 "state": "pending", "next_attempt_at": now, "attempts": []} for c in configs]

    async def _attempt(self, tenant: str, run_id: str, d_id: str) -> None:
        delivery = await self.outbox.delivery(tenant, run_id, d_id)
        if delivery is None or delivery["state"] != "pending":
            await self.outbox.drop(keys.WEBHOOK_DUE, f"{tenant}/{run_id}/{d_id}")
            return
        sent_at = datetime.now(timezone.utc)
        if delivery.get("kind") == "a2a":  # one deliverer, two payload shapes
            headers = a2a_push.headers(delivery)
        else:
            headers = {"content-type": "application/json", "user-agent": "Trellis-Webhooks/1", "webhook-id": d_id,
                       "webhook-timestamp": str(int(sent_at.timestamp())),
                       "webhook-signature": Webhook(delivery["secret"]).sign(d_id, sent_at, delivery["body"])}
        status_code, error, final = 0, "", False
        try:
            resp = await self.http.request("POST", delivery["url"], data=delivery["body"].encode(), headers=headers,
                                           timeout_s=self.settings.webhook_timeout_s)
            status_code = resp.status
            if not 200 <= resp.status < 300:
                error = f"the receiver answered HTTP {resp.status}"
        except EgressBlocked as exc:  # not retried: the address stays private
            error, final = str(exc), True
        except ValueError as exc:
            error, final = str(exc), True
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        now = time.time()
        delivery["attempts"].append({"at": sent_at.timestamp(), "status_code": status_code, "error": error})
        if not error:
            delivery["state"] = "delivered"
        elif final or now - delivery["created_at"] >= self.settings.webhook_retry_for_s:
            delivery["state"] = "failed"
        else:
            delivery["next_attempt_at"] = now + self.backoff(len(delivery["attempts"]))
        if delivery["state"] != "pending":
            delivery["next_attempt_at"] = 0
        log.info("webhook delivery %s of run %s to %s: %s", d_id, run_id, delivery["url"], error or "delivered")
        await self.outbox.save_delivery(tenant, run_id, delivery)

    def backoff(self, attempts: int) -> float:
        """Seconds before the next attempt after `attempts` failed ones: exponential, capped, with jitter."""
        s = self.settings
        return min(s.webhook_retry_max_s, s.webhook_retry_base_s * 2 ** min(attempts - 1, 30)) * random.uniform(0.5, 1.0)
