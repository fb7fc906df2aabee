"""RetrievalClient: how the orchestrator's Retrieval component reaches the retrieval service.

    client = RetrievalClient.connect("127.0.0.1:50053")
    chunks = await client.search(tenant, "what is trellis", ["ds1"], top_n=8)
    dataset = await client.find_dataset(tenant, "manuals")      # by exact name, or None

Plain dataclasses in and out; failures are the typed errors of services/clients/_rpc.py (an unknown
dataset is `NotFound`, a bad search `InvalidArgument`). Every call has a deadline: 60 s unless the
client or the call says otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.clients._rpc import Peer, RetryPolicy


@dataclass(frozen=True, slots=True)
class MetadataCondition:
    """Keep chunks whose document metadata `key` satisfies `operator` ("=", "contains", ">", "empty"...) `value`."""

    key: str
    operator: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One search hit, best first in a result."""

    id: str
    content: str
    document_id: str
    document_name: str
    dataset_id: str
    similarity: float
    vector_similarity: float
    term_similarity: float
    metadata: dict[str, Any] = field(default_factory=dict)  # the document's metadata
    positions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DatasetRef:
    id: str
    name: str


class RetrievalClient(Peer):
    """The `RetrievalService` calls other services make."""

    peer = "retrieval service"
    stub = rr_grpc.RetrievalServiceStub

    def __init__(self, channel: Any, *, timeout_s: float | None = 60.0, retry: RetryPolicy | None = None) -> None:
        super().__init__(channel, timeout_s=timeout_s, retry=retry)

    async def search(
        self,
        tenant_id: str,
        query: str,
        dataset_ids: Sequence[str],
        *,
        top_n: int = 0,
        top_k: int = 0,
        similarity_threshold: float = 0.0,
        keywords_similarity_weight: float = 0.0,
        rerank_model: str = "",
        metadata_filter: Sequence[MetadataCondition] = (),
        metadata_logic: str = "and",
        document_ids: Sequence[str] = (),
        timeout_s: float | None = None,
    ) -> list[Chunk]:
        """The best chunks of `dataset_ids` for `query`; 0 for a number means the service's default."""
        req = rr_pb.SearchRequest(
            tenant_id=tenant_id, query=query, dataset_ids=list(dataset_ids), document_ids=list(document_ids),
            top_n=top_n, top_k=top_k, similarity_threshold=similarity_threshold,
            keywords_similarity_weight=keywords_similarity_weight, rerank_model=rerank_model,
            metadata_filter=[rr_pb.MetadataCondition(key=c.key, operator=c.operator, value=c.value) for c in metadata_filter],
            metadata_logic=metadata_logic)
        resp = await self._unary(self._stub.Search, req, timeout_s)
        return [_chunk(c) for c in resp.chunks]

    async def find_dataset(self, tenant_id: str, name: str, *, timeout_s: float | None = None) -> DatasetRef | None:
        """The tenant's dataset called exactly `name`, or None."""
        req = rr_pb.ListDatasetsRequest(tenant_id=tenant_id, name=name)
        resp = await self._unary(self._stub.ListDatasets, req, timeout_s)
        return DatasetRef(resp.datasets[0].id, resp.datasets[0].name) if resp.datasets else None


def _chunk(c: rr_pb.Chunk) -> Chunk:
    return Chunk(
        id=c.id, content=c.content, document_id=c.document_id, document_name=c.document_name,
        dataset_id=c.dataset_id, similarity=c.similarity, vector_similarity=c.vector_similarity,
        term_similarity=c.term_similarity, metadata=json.loads(c.metadata_json) if c.metadata_json else {},
        positions=tuple(c.positions))
