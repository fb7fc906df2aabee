"""Domain <-> protobuf for the retrieval service (business code never imports `_pb2`)."""

from __future__ import annotations

import json

from google.protobuf.timestamp_pb2 import Timestamp
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from services.retrieval.models import Dataset, Document, Hit, MetadataCondition
from services.retrieval.search import SearchParams


def _ts(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def dataset_to_proto(ds: Dataset) -> rr_pb.Dataset:
    return rr_pb.Dataset(
        id=ds.id, tenant_id=ds.tenant_id, name=ds.name, description=ds.description,
        embedding_model=ds.embedding_model, chunk_size=ds.chunk_size, chunk_overlap=ds.chunk_overlap,
        document_count=ds.document_count, chunk_count=ds.chunk_count, created_at=_ts(ds.created_at),
        settings_json=ds.settings, updated_at=_ts(ds.modified), pagerank=ds.pagerank)


def document_to_proto(doc: Document) -> rr_pb.Document:
    return rr_pb.Document(
        id=doc.id, dataset_id=doc.dataset_id, name=doc.name, mime_type=doc.mime_type, size=doc.size,
        status=int(doc.status), error=doc.error, chunk_count=doc.chunk_count,
        metadata_json=json.dumps(doc.metadata, ensure_ascii=False) if doc.metadata else "",
        created_at=_ts(doc.created_at), updated_at=_ts(doc.updated_at), disabled=doc.disabled,
        settings_json=doc.settings)


def hit_to_proto(h: Hit) -> rr_pb.Chunk:
    return rr_pb.Chunk(
        id=h.chunk_id, content=h.content, document_id=h.document_id, document_name=h.document_name,
        dataset_id=h.dataset_id, similarity=h.similarity, vector_similarity=h.vector_similarity,
        term_similarity=h.term_similarity,
        metadata_json=json.dumps(h.metadata, ensure_ascii=False) if h.metadata else "", positions=h.positions,
        extra_json=json.dumps(h.extra, ensure_ascii=False) if h.extra else "")


def search_params(tenant_id: str, r: rr_pb.SearchRequest) -> SearchParams:
    # proto3 cannot tell 0 from unset: 0 means "RAGFlow's default" for every numeric knob but the
    # threshold, where 0 is a meaningful "keep everything"; the keyword weight 0 means vector-only.
    return SearchParams(
        tenant_id=tenant_id, query=r.query, dataset_ids=tuple(r.dataset_ids), document_ids=tuple(r.document_ids),
        top_n=r.top_n, top_k=r.top_k, similarity_threshold=r.similarity_threshold,
        keywords_similarity_weight=r.keywords_similarity_weight, rerank_model=r.rerank_model,
        metadata_filter=tuple(MetadataCondition(c.key, c.operator, c.value) for c in r.metadata_filter),
        metadata_logic=r.metadata_logic or "and")
