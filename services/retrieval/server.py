"""RetrievalService: every RPC answers UNIMPLEMENTED, naming the issue that brings it, until it lands."""

from __future__ import annotations

from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.common.errors import not_yet

_ISSUE = "issue 6 (retrieval service)"


class RetrievalServicer(rr_grpc.RetrievalServiceServicer):
    async def CreateDataset(self, request, context):
        raise not_yet("RetrievalService.CreateDataset", _ISSUE)

    async def ListDatasets(self, request, context):
        raise not_yet("RetrievalService.ListDatasets", _ISSUE)

    async def DeleteDataset(self, request, context):
        raise not_yet("RetrievalService.DeleteDataset", _ISSUE)

    async def IngestDocument(self, request, context):
        raise not_yet("RetrievalService.IngestDocument", _ISSUE)

    async def ListDocuments(self, request, context):
        raise not_yet("RetrievalService.ListDocuments", _ISSUE)

    async def DeleteDocument(self, request, context):
        raise not_yet("RetrievalService.DeleteDocument", _ISSUE)

    async def Search(self, request, context):
        raise not_yet("RetrievalService.Search", _ISSUE)
