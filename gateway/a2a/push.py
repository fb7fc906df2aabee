"""Push notifications: a task's push-notification configs are completion webhooks with the A2A payload.

The configs are kept by the orchestrator, beside the task's first run (WebhookService.SetTaskPushConfig,
ListTaskPushConfigs, DeleteTaskPushConfig), so every gateway replica, and a gateway after a restart, sees them.
When a run of the task ends in a state A2A notifies (completed, failed, canceled, input required), the
orchestrator's outbox POSTs the Task as JSON (`{"task": ...}`) to each config's URL with its token in
`X-A2A-Notification-Token` and its authentication in `Authorization`, with the completion webhooks' retries
(about a day), SSRF guard and attempt records (ListRunDeliveries of the run, source "a2a"):
services/orchestrator/triggers/a2a_push.py. The gateway delivers nothing itself.

A push URL that resolves to a loopback, private, link-local or metadata address is refused here, when the
config is set (the a2a-sdk's screen), unless TRELLIS_A2A_PUSH_PRIVATE_HOSTS=1; the orchestrator's SSRF guard
refuses it again at delivery unless its TRELLIS_SSRF_ALLOWLIST names the host: a private receiver needs both.
"""

from __future__ import annotations

import grpc
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from a2a.utils.push_url_validator import validate_push_notification_url
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb
from trellis.canvas.v1 import webhook_service_pb2_grpc as hook_grpc

from gateway.errors import from_rpc_error
from gateway.orchestrator import Orchestrator


def _to_a2a(task_id: str, c: hook_pb.TaskPushConfig) -> a2a.TaskPushNotificationConfig:
    config = a2a.TaskPushNotificationConfig(id=c.id, task_id=task_id, url=c.url, token=c.token)
    if c.auth_scheme:
        config.authentication.CopyFrom(a2a.AuthenticationInfo(scheme=c.auth_scheme, credentials=c.auth_credentials))
    return config


class PushConfigs:
    """A tenant's A2A push-notification configs, in the orchestrator."""

    def __init__(self, channel: grpc.aio.Channel, *, private_hosts: bool = False) -> None:
        """`private_hosts`: also accept loopback and private addresses (the SDK's URL screen off)."""
        self._stub = hook_grpc.WebhookServiceStub(channel)
        self._private_hosts = private_hosts

    async def _call(self, orch: Orchestrator, method, request):
        try:
            return await orch.unary(method, request)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise TaskNotFoundError(message=exc.details() or "task not found") from None
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidParamsError(message=exc.details() or "invalid push notification config") from None
            raise from_rpc_error(exc) from None

    async def set(self, orch: Orchestrator, tenant: str, agent_id: str, config: a2a.TaskPushNotificationConfig, *,
                  latest_run_id: str = "") -> a2a.TaskPushNotificationConfig:
        """Keep `config` for its task; `latest_run_id`, the task's newest run: its end is pushed to the config
        too when it has ended already."""
        if not self._private_hosts and not await validate_push_notification_url(config.url):
            raise InvalidParamsError(message=f"push notification url {config.url!r} is not a public http(s) URL")
        auth = config.authentication
        request = hook_pb.SetTaskPushConfigRequest(
            tenant_id=tenant, agent_id=agent_id, task_id=config.task_id, latest_run_id=latest_run_id,
            config=hook_pb.TaskPushConfig(id=config.id or config.task_id, url=config.url, token=config.token,
                                          auth_scheme=auth.scheme, auth_credentials=auth.credentials))
        saved = await self._call(orch, self._stub.SetTaskPushConfig, request)
        return _to_a2a(config.task_id, saved.config)

    async def list(self, orch: Orchestrator, tenant: str, agent_id: str, task_id: str
                   ) -> list[a2a.TaskPushNotificationConfig]:
        resp = await self._call(orch, self._stub.ListTaskPushConfigs, hook_pb.ListTaskPushConfigsRequest(
            tenant_id=tenant, agent_id=agent_id, task_id=task_id))
        return [_to_a2a(task_id, c) for c in resp.configs]

    async def delete(self, orch: Orchestrator, tenant: str, agent_id: str, task_id: str, config_id: str) -> None:
        await self._call(orch, self._stub.DeleteTaskPushConfig, hook_pb.DeleteTaskPushConfigRequest(
            tenant_id=tenant, agent_id=agent_id, task_id=task_id, config_id=config_id))
