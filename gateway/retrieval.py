"""The gateway's calls into the retrieval service: one stub on the shared channel, each call with the
configured deadline, its errors as `GatewayError` naming the retrieval service.

    rv = request.app[RETRIEVAL]
    resp = await rv.call(rv.stub.ListDocuments, rr_pb.ListDocumentsRequest(tenant_id=t, dataset_id=d))
    everything = await rv.datasets(tenant)      # every page
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import grpc
from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from gateway.errors import from_rpc_error

_PAGE = 1000  # the retrieval service's largest page


class Retrieval:
    def __init__(self, channel: grpc.aio.Channel, *, rpc_timeout_s: float, ingest_timeout_s: float) -> None:
        self.stub = rr_grpc.RetrievalServiceStub(channel)
        self.rpc_timeout_s = rpc_timeout_s
        self.ingest_timeout_s = ingest_timeout_s  # an upload is parsed, chunked and embedded before the answer

    async def call(self, method: Callable[..., Awaitable[Any]], request: Any, *, timeout_s: float | None = None) -> Any:
        try:
            return await method(request, timeout=timeout_s or self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc, "retrieval service") from None

    async def ingest(self, request: rr_pb.IngestDocumentRequest) -> rr_pb.Document:
        return (await self.call(self.stub.IngestDocument, request, timeout_s=self.ingest_timeout_s)).document

    async def datasets(self, tenant_id: str) -> list[rr_pb.Dataset]:
        """Every dataset of the tenant, newest first, a page at a time."""
        found: list[rr_pb.Dataset] = []
        while True:
            req = rr_pb.ListDatasetsRequest(tenant_id=tenant_id, page=len(found) // _PAGE + 1, page_size=_PAGE)
            resp = await self.call(self.stub.ListDatasets, req)
            found += resp.datasets
            if len(resp.datasets) < _PAGE or len(found) >= resp.total:
                return found

    async def documents(self, tenant_id: str, dataset_id: str) -> list[rr_pb.Document]:
        """Every document of the dataset, newest first, a page at a time."""
        docs: list[rr_pb.Document] = []
        while True:
            req = rr_pb.ListDocumentsRequest(tenant_id=tenant_id, dataset_id=dataset_id, page=len(docs) // _PAGE + 1,
                                             page_size=_PAGE)
            resp = await self.call(self.stub.ListDocuments, req)
            docs += resp.documents
            if len(resp.documents) < _PAGE or len(docs) >= resp.total:
                return docs


RETRIEVAL = web.AppKey("retrieval", Retrieval)
