"""The gateway's calls into the retrieval service: the typed peer client (services/clients/retrieval.py:
the configured deadline per call, the one retry rule for a request that never reached the service, one
translation of failures) plus what the RAGFlow routes need, any RPC with the protobuf messages their views
read, its failure as a `GatewayError` naming the retrieval service.

    rv = request.app[RETRIEVAL]
    resp = await rv.call(rv.rpc.ListDocuments, rr_pb.ListDocumentsRequest(tenant_id=t, dataset_id=d))
    everything = await rv.datasets(tenant)      # every page
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import grpc
from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.errors import GatewayError
from services.clients.retrieval import RetrievalClient
from services.common.errors import ServiceError

log = logging.getLogger(__name__)
_PAGE = 1000  # the retrieval service's largest page


def _gateway_error(err: ServiceError) -> GatewayError:
    """The peer's own message for what it refused; a plain sentence when the hop itself failed."""
    if err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        log.warning("retrieval service unavailable: %s", err.message)
        return GatewayError("the retrieval service is unavailable; try again shortly", code=grpc.StatusCode.UNAVAILABLE)
    if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return GatewayError("the retrieval service did not answer in time", code=err.code)
    if err.code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS):
        log.error("retrieval service failed with %s: %s", err.code.name, err.message)
    return GatewayError(err.message or "internal error in the retrieval service", code=err.code)


class Retrieval(RetrievalClient):
    def __init__(self, channel: grpc.aio.Channel, *, rpc_timeout_s: float, ingest_timeout_s: float) -> None:
        super().__init__(channel, timeout_s=rpc_timeout_s)
        self.rpc = self._stub  # the RetrievalService stub, whose methods `call` takes
        self.ingest_timeout_s = ingest_timeout_s  # an upload is parsed, chunked and embedded before the answer

    async def call(self, method: Callable[..., Awaitable[Any]], request: Any, *, timeout_s: float | None = None) -> Any:
        try:
            return await self._unary(method, request, timeout_s)
        except ServiceError as err:
            raise _gateway_error(err) from None

    async def ingest(self, request: rr_pb.IngestDocumentRequest) -> rr_pb.Document:
        return (await self.call(self.rpc.IngestDocument, request, timeout_s=self.ingest_timeout_s)).document

    async def datasets(self, tenant_id: str) -> list[rr_pb.Dataset]:
        """Every dataset of the tenant, newest first, a page at a time."""
        found: list[rr_pb.Dataset] = []
        while True:
            req = rr_pb.ListDatasetsRequest(tenant_id=tenant_id, page=len(found) // _PAGE + 1, page_size=_PAGE)
            resp = await self.call(self.rpc.ListDatasets, req)
            found += resp.datasets
            if len(resp.datasets) < _PAGE or len(found) >= resp.total:
                return found

    async def documents(self, tenant_id: str, dataset_id: str) -> list[rr_pb.Document]:
        """Every document of the dataset, newest first, a page at a time."""
        docs: list[rr_pb.Document] = []
        while True:
            req = rr_pb.ListDocumentsRequest(tenant_id=tenant_id, dataset_id=dataset_id, page=len(docs) // _PAGE + 1,
                                             page_size=_PAGE)
            resp = await self.call(self.rpc.ListDocuments, req)
            docs += resp.documents
            if len(resp.documents) < _PAGE or len(docs) >= resp.total:
                return docs


RETRIEVAL = web.AppKey("retrieval", Retrieval)
