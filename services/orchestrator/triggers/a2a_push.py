"""A2A push notifications are completion webhooks with the A2A payload (docs/agents-as-services.md).

A task's push-notification configs (set through the gateway's A2A door: WebhookService.SetTaskPushConfig) are
kept beside the task's first run (store/outbox.py). When a run of the task ends in a state A2A notifies, the
deliverer (triggers/webhooks_out.py) gives each config a delivery of the same outbox, with the same retries,
SSRF guard and attempt records; only its shape differs (`kind` "a2a"):

- the body is the A2A 1.0 push: the Task as JSON in a StreamResponse, `{"task": {...}}`, as the gateway serves
  it (gateway/a2a/handler.py RunView): id (the task), contextId (the session), status {state, timestamp,
  message}, the answer as the `answer` artifact (its references in the artifact's metadata), metadata.run_id;
- the headers are `X-A2A-Notification-Token` (the config's token) and `Authorization: <scheme> <credentials>`
  (its authentication), instead of the Standard Webhooks signature.

The task of a run is the first run of its chain: a run that resumed a paused one (same session and agent) has
it as its parent. What the Task says is read when the push is made, from what the run's end stored anyway
(`run_end`: its turn in the session, and for a run waiting for the user its journal's UserInputRequired).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from trellis.canvas.v1 import events_pb2 as ev_pb
from yarl import URL

from services.common.errors import InvalidArgument

# run status -> the A2A task state it is pushed as
STATES = {"succeeded": "TASK_STATE_COMPLETED", "failed": "TASK_STATE_FAILED", "cancelled": "TASK_STATE_CANCELED",
          "waiting_for_user": "TASK_STATE_INPUT_REQUIRED"}
ANSWER = "answer"
SOURCE = "a2a"


def push_config(config_id: str, url: str, token: str = "", auth_scheme: str = "", auth_credentials: str = ""
                ) -> dict[str, Any]:
    """A checked config; without an id, a new one."""
    parsed = URL(url or "")
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidArgument(f"push notification url {url!r} must be an http(s) URL with a host")
    if auth_credentials and not auth_scheme:
        raise InvalidArgument("push notification authentication credentials need a scheme")
    return {"id": config_id or uuid.uuid4().hex, "url": url, "token": token, "auth_scheme": auth_scheme,
            "auth_credentials": auth_credentials, "created_at": time.time()}


def run_end(run_id: str, session_id: str, messages: list[bytes], events: list[bytes]) -> dict[str, Any]:
    """What run `run_id` ended with, for `task_body`: its answer and references (the assistant message of its
    turn in the session's `messages`, whose id is the run's) and, when it waits for the user, what it asks (the
    last UserInputRequired of its journal's `events`, newest first: the turn shows its tips as its answer)."""
    end: dict[str, Any] = {"session_id": session_id}
    for raw in reversed(messages):
        m = json.loads(raw)
        if m.get("id") == run_id and m.get("role") == "assistant":
            end["answer"], end["reference"] = m.get("content") or "", m.get("reference") or {}
            break
    for raw in events:
        event = ev_pb.RunEvent.FromString(raw)
        if event.WhichOneof("kind") == "user_input_required":
            end["tips"] = event.user_input_required.tips
            end["form"] = json.loads(event.user_input_required.inputs_json or "{}")
            if end.get("answer") == end["tips"]:
                end["answer"] = ""
            break
    return end


def _message(text: str, task_id: str, context_id: str, data: Any = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    if data is not None:
        parts.append({"data": data})
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT", "parts": parts, "taskId": task_id,
            "contextId": context_id}


def task_body(task_id: str, run_id: str, run: dict[str, str], status: str, end: dict[str, Any]) -> dict[str, Any]:
    """The push's body: the task as run `run_id` (ended with `status`, `end` what it stored) left it."""
    context_id = end.get("session_id") or run.get("session_id", "")
    state = STATES[status]
    stamp = datetime.fromtimestamp(float(run.get("finished_at") or time.time()), timezone.utc)
    task_status: dict[str, Any] = {"state": state, "timestamp": stamp.isoformat().replace("+00:00", "Z")}
    error = run.get("error") or end.get("error") or ""
    if status == "waiting_for_user":
        task_status["message"] = _message(end.get("tips") or "The agent needs more input.", task_id, context_id,
                                          {"awaiting": end.get("form") or {}})
    elif status == "failed":
        task_status["message"] = _message(error, task_id, context_id)
    task: dict[str, Any] = {"id": task_id, "contextId": context_id, "status": task_status,
                            "metadata": {"run_id": run_id}}
    answer, reference = end.get("answer") or "", end.get("reference") or {}
    if answer or reference:
        artifact: dict[str, Any] = {"artifactId": f"{ANSWER}-{task_id}", "name": ANSWER, "parts": [{"text": answer}]}
        if reference:
            artifact["metadata"] = {"references": [reference], "run_id": run_id}
        task["artifacts"] = [artifact]
    return {"task": task}


def headers(delivery: dict[str, Any]) -> dict[str, str]:
    """An A2A push's headers: its config's token and authentication."""
    out = {"content-type": "application/json", "user-agent": "Trellis-A2A-Push/1"}
    if delivery.get("token"):
        out["X-A2A-Notification-Token"] = delivery["token"]
    if delivery.get("auth_scheme") and delivery.get("auth_credentials"):
        out["Authorization"] = f"{delivery['auth_scheme']} {delivery['auth_credentials']}"
    return out
