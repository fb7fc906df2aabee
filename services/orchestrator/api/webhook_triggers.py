"""WebhookTriggerService: the rate limit and the test log of RAGFlow's webhook trigger (store/webhook_triggers.py)."""

from __future__ import annotations

from trellis.canvas.v1 import webhook_trigger_service_pb2 as wt_pb
from trellis.canvas.v1 import webhook_trigger_service_pb2_grpc as wt_grpc

from services.common.errors import InvalidArgument
from services.common.server import Binding
from services.orchestrator.api.requests import tenant_of
from services.orchestrator.store.webhook_triggers import WebhookTriggerStore

_WINDOWS = {1, 60, 3600, 86400}


class WebhookTriggerServicer(wt_grpc.WebhookTriggerServiceServicer):
    def __init__(self, store: WebhookTriggerStore) -> None:
        self.store = store

    async def TakeWebhookRequest(self, request: wt_pb.TakeWebhookRequestRequest, context) -> wt_pb.TakeWebhookRequestResponse:
        tenant = tenant_of(request)
        if request.limit < 1 or request.window_s not in _WINDOWS:
            raise InvalidArgument(f"limit must be at least 1 and window_s one of {sorted(_WINDOWS)}")
        allowed = await self.store.take(tenant, request.agent_id, request.limit, request.window_s)
        return wt_pb.TakeWebhookRequestResponse(allowed=allowed)

    async def AppendWebhookLog(self, request: wt_pb.AppendWebhookLogRequest, context) -> wt_pb.AppendWebhookLogResponse:
        tenant = tenant_of(request)
        if not request.start_ts:
            raise InvalidArgument("start_ts is required")
        if request.events_json:
            await self.store.append(tenant, request.agent_id, request.start_ts, list(request.events_json))
        return wt_pb.AppendWebhookLogResponse()

    async def GetWebhookLog(self, request: wt_pb.GetWebhookLogRequest, context) -> wt_pb.GetWebhookLogResponse:
        tenant = tenant_of(request)
        found = await self.store.webhooks(tenant, request.agent_id)
        return wt_pb.GetWebhookLogResponse(webhooks=[wt_pb.WebhookLog(start_ts=ts, events_json=events)
                                                     for ts, events in found.items()])


def binding(redis, target) -> Binding:
    """The service on the orchestrator's Redis (`target`: its RedisTarget), for app.build's bindings."""
    servicer = WebhookTriggerServicer(WebhookTriggerStore(redis, target))
    return Binding(wt_grpc.add_WebhookTriggerServiceServicer_to_server, servicer,
                   wt_pb.DESCRIPTOR.services_by_name["WebhookTriggerService"].full_name)
