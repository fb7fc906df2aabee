"""Push notifications: a POST of the task to each webhook its push-notification configs name, when the task's
status changes (working -> input required, completed, failed, cancelled).

Trellis had no completion webhooks to reuse, so this is the one delivery: the a2a-sdk's config store and
sender (`BasePushNotificationSender`: the `X-A2A-Notification-Token` header, the config's Authorization), fed
by a follower task per run that watches the run's stream (WatchRun) and hands each new status over.

Push URLs that resolve to loopback, private, link-local or metadata addresses are refused (the SDK's screen)
unless TRELLIS_A2A_PUSH_PRIVATE_HOSTS=1.

The configs live in this gateway process (the SDK's in-memory store, owned per tenant): they last as long as
the process, and the run they watch is followed by the process that took the config. A durable store in the
orchestrator, next to the run, is the step after this one (docs/agents-as-services.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

import httpx
from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore
from a2a.types import a2a_pb2 as a2a
from a2a.utils.push_url_validator import validate_push_notification_url

log = logging.getLogger(__name__)


class PushDelivery:
    def __init__(self, *, private_hosts: bool = False, timeout_s: float = 10.0) -> None:
        """`private_hosts`: also deliver to loopback and private addresses (the SDK's URL screen off)."""
        self.store = InMemoryPushNotificationConfigStore()
        self._http = httpx.AsyncClient(timeout=timeout_s)
        self._sender = BasePushNotificationSender(
            self._http, self.store, push_url_validator=None if private_hosts else validate_push_notification_url)
        self._following: dict[str, asyncio.Task[None]] = {}

    async def send(self, task: a2a.Task) -> None:
        """The task as it is now, to its configs."""
        await self._sender.send_notification(task.id, task)

    def follow(self, task_id: str, snapshots: AsyncIterator[a2a.Task]) -> None:
        """Deliver each snapshot of task `task_id` to its configs; one follower per task at a time."""
        if task_id in self._following:
            aclose = getattr(snapshots, "aclose", None)
            if aclose is not None:
                asyncio.get_running_loop().create_task(aclose())
            return
        self._following[task_id] = asyncio.get_running_loop().create_task(self._deliver(task_id, snapshots))

    async def _deliver(self, task_id: str, snapshots: AsyncIterator[a2a.Task]) -> None:
        try:
            async for task in snapshots:
                await self._sender.send_notification(task_id, task)
        except Exception:
            log.exception("push notifications of task %s stopped", task_id)
        finally:
            self._following.pop(task_id, None)

    async def aclose(self) -> None:
        for task in list(self._following.values()):
            task.cancel()
        await asyncio.gather(*self._following.values(), return_exceptions=True)
        await self._http.aclose()
