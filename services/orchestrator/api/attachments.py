"""AttachmentService: a tenant's run attachments (attachments.py), read by the gateway's download route."""

from __future__ import annotations

from trellis.canvas.v1 import attachment_service_pb2 as att_pb
from trellis.canvas.v1 import attachment_service_pb2_grpc as att_grpc

from services.common.errors import InvalidArgument, NotFound
from services.orchestrator.api.requests import tenant_of
from services.orchestrator.store.attachments import AttachmentStore


class AttachmentServicer(att_grpc.AttachmentServiceServicer):
    def __init__(self, store: AttachmentStore) -> None:
        self.store = store

    async def GetAttachment(self, request: att_pb.GetAttachmentRequest, context) -> att_pb.Attachment:
        tenant = tenant_of(request)
        if not request.attachment_id:
            raise InvalidArgument("attachment_id is required")
        found = await self.store.get(tenant, request.attachment_id)
        if found is None:
            raise NotFound(f"attachment {request.attachment_id} not found")
        return att_pb.Attachment(id=found.id, filename=found.filename, mime_type=found.mime_type,
                                 content=found.content, run_id=found.run_id, created_at=found.created_at)
