"""WebhookService: an agent's completion webhook, a run's deliveries and a task's A2A push-notification configs
(store/outbox.py, triggers/webhooks_out.py, triggers/a2a_push.py)."""

from __future__ import annotations

from trellis.canvas.v1 import webhook_service_pb2 as hook_pb
from trellis.canvas.v1 import webhook_service_pb2_grpc as hook_grpc

from services.common.errors import InvalidArgument, NotFound
from services.orchestrator.api.convert_triggers import delivery_to_proto, webhook_from_proto, webhook_to_proto
from services.orchestrator.api.requests import tenant_of as _tenant
from services.orchestrator.runs.queries import RunQueries
from services.orchestrator.store import AgentStore
from services.orchestrator.store.outbox import Outbox
from services.orchestrator.store.push_configs import PushConfigStore
from services.orchestrator.triggers import a2a_push


def _push_to_proto(config: dict) -> hook_pb.TaskPushConfig:
    return hook_pb.TaskPushConfig(id=config["id"], url=config["url"], token=config.get("token", ""),
                                  auth_scheme=config.get("auth_scheme", ""),
                                  auth_credentials=config.get("auth_credentials", ""))


class WebhookServicer(hook_grpc.WebhookServiceServicer):
    def __init__(self, agents: AgentStore, outbox: Outbox, queries: RunQueries) -> None:
        self.agents = agents
        self.outbox = outbox
        self.push_configs = PushConfigStore(outbox.redis)
        self.queries = queries

    async def SetAgentWebhook(self, request, context):
        tenant = _tenant(request)
        if not request.HasField("webhook"):
            raise InvalidArgument("webhook is required")
        await self.agents.get(tenant, request.agent_id)
        hook = webhook_from_proto(request.webhook, "agent", make_secret=True)
        await self.outbox.set_agent_webhook(tenant, request.agent_id, hook)
        return hook_pb.SetAgentWebhookResponse(webhook=webhook_to_proto(hook, with_secret=True))

    async def GetAgentWebhook(self, request, context):
        hook = await self.outbox.agent_webhook(_tenant(request), request.agent_id)
        if hook is None:
            raise NotFound(f"agent {request.agent_id!r} has no completion webhook")
        return hook_pb.GetAgentWebhookResponse(webhook=webhook_to_proto(hook))

    async def DeleteAgentWebhook(self, request, context):
        deleted = await self.outbox.delete_agent_webhook(_tenant(request), request.agent_id)
        return hook_pb.DeleteAgentWebhookResponse(deleted=deleted)

    async def ListRunDeliveries(self, request, context):
        if not request.run_id:
            raise InvalidArgument("run_id is required")
        await self.queries.info(_tenant(request), request.run_id, request.agent_id)  # this tenant's (and agent's)
        deliveries = await self.outbox.run_deliveries(request.tenant_id, request.run_id)
        return hook_pb.ListRunDeliveriesResponse(deliveries=[delivery_to_proto(d) for d in deliveries])

    async def SetTaskPushConfig(self, request, context):
        tenant = _tenant(request)
        if not request.task_id:
            raise InvalidArgument("task_id is required")
        await self.queries.info(tenant, request.task_id, request.agent_id)
        c = request.config
        config = a2a_push.push_config(c.id, c.url, c.token, c.auth_scheme, c.auth_credentials)
        await self.push_configs.set(tenant, request.task_id, config)
        if request.latest_run_id:  # it ended already: its end goes to this config too
            latest = await self.queries.info(tenant, request.latest_run_id, request.agent_id)
            if latest.get("status") in a2a_push.STATES:
                await self.push_configs.notify_again(tenant, request.latest_run_id, latest["status"])
        return hook_pb.SetTaskPushConfigResponse(config=_push_to_proto(config))

    async def ListTaskPushConfigs(self, request, context):
        tenant = _tenant(request)
        await self.queries.info(tenant, request.task_id, request.agent_id)
        configs = await self.push_configs.list(tenant, request.task_id)
        return hook_pb.ListTaskPushConfigsResponse(configs=[_push_to_proto(c) for c in configs])

    async def DeleteTaskPushConfig(self, request, context):
        tenant = _tenant(request)
        await self.queries.info(tenant, request.task_id, request.agent_id)
        deleted = await self.push_configs.delete(tenant, request.task_id, request.config_id)
        return hook_pb.DeleteTaskPushConfigResponse(deleted=deleted)
