"""RetrievalServicer: the thin protobuf <-> domain adapter (the work is in ingest.py, search.py and backends/)."""

from __future__ import annotations

import json

import grpc
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.common.errors import InvalidArgument, NotFound
from services.common.server import Binding
from services.retrieval import convert, metadata_filter
from services.retrieval.backends.base import Backend
from services.retrieval.catalog import Catalog
from services.retrieval.chunks import ChunkEditor
from services.retrieval.config import RetrievalConfig
from services.retrieval.ingest import Ingestor
from services.retrieval.llm import LlmPeer
from services.common.json_fields import json_object
from services.retrieval.models import ChunkRecord, Dataset, Document, MetadataCondition, new_id
from services.retrieval.parse_jobs import ParseJobs
from services.retrieval.search import Searcher

SERVICE_NAME = rr_pb.DESCRIPTOR.services_by_name["RetrievalService"].full_name
_MAX_PAGE = 1000


def _tenant(request) -> str:
    if not request.tenant_id:
        raise InvalidArgument("tenant_id is required")
    return request.tenant_id


def _given(request, field: str):
    """An optional field's value, None when unset."""
    return getattr(request, field) if request.HasField(field) else None


def _page(page: int, size: int, default_size: int = 30) -> tuple[int, int]:
    if page < 0 or size < 0:
        raise InvalidArgument("page and page_size must not be negative")
    size = min(size or default_size, _MAX_PAGE)
    return (max(page, 1) - 1) * size, size


class RetrievalServicer(rr_grpc.RetrievalServiceServicer):
    def __init__(self, cfg: RetrievalConfig, backend: Backend, llm: LlmPeer) -> None:
        self.cfg = cfg
        self.backend = backend
        self.llm = llm
        self.ingestor = Ingestor(backend, llm, max_document_bytes=int(cfg.max_document_mb * 1024 * 1024))
        self.parse_jobs = ParseJobs(backend, self.ingestor)
        self.chunks = ChunkEditor(backend, llm)
        self.catalog = Catalog(backend, self.chunks.locks, llm)
        self.searcher = Searcher(backend, llm, max_candidates=cfg.max_candidates, rerank_limit=cfg.rerank_limit)

    async def start(self) -> None:
        await self.backend.open()

    def binding(self) -> Binding:
        return Binding(rr_grpc.add_RetrievalServiceServicer_to_server, self, SERVICE_NAME)

    async def aclose(self) -> None:
        await self.parse_jobs.aclose()
        await self.llm.close()
        await self.backend.aclose()

    # ------------------------------------------------------------------------------------ datasets
    async def CreateDataset(self, request: rr_pb.CreateDatasetRequest, context: grpc.aio.ServicerContext) -> rr_pb.CreateDatasetResponse:
        tenant = _tenant(request)
        name = request.name.strip()
        if not name:
            raise InvalidArgument("name is required (the dataset's name)")
        if len(name) > 128:
            raise InvalidArgument("name is longer than 128 characters")
        size = request.chunk_size or self.cfg.chunk_size
        overlap = request.chunk_overlap or min(self.cfg.chunk_overlap, size // 2)
        if not 16 <= size <= 8192:
            raise InvalidArgument(f"chunk_size must be between 16 and 8192 tokens, got {size}")
        if not 0 <= overlap <= size // 2:
            raise InvalidArgument(f"chunk_overlap must be between 0 and half of chunk_size ({size // 2}), got {overlap}")
        json_object(request.settings_json, "settings_json")  # refuses anything but a JSON object
        ds = Dataset(new_id(), tenant, name, request.description, request.embedding_model.strip(), size, overlap,
                     settings=request.settings_json)
        await self.backend.create_dataset(ds)
        return rr_pb.CreateDatasetResponse(dataset=convert.dataset_to_proto(ds))

    async def ListDatasets(self, request: rr_pb.ListDatasetsRequest, context: grpc.aio.ServicerContext) -> rr_pb.ListDatasetsResponse:
        offset, limit = _page(request.page, request.page_size)
        order = "update_time" if request.order_by == rr_pb.DATASET_ORDER_UPDATE_TIME else "create_time"
        items, total = await self.backend.list_datasets(_tenant(request), name=request.name, offset=offset, limit=limit,
                                                        order_by=order, ascending=request.ascending)
        return rr_pb.ListDatasetsResponse(datasets=[convert.dataset_to_proto(d) for d in items], total=total)

    async def UpdateDataset(self, request: rr_pb.UpdateDatasetRequest, context: grpc.aio.ServicerContext) -> rr_pb.UpdateDatasetResponse:
        settings = request.settings_json if request.HasField("settings_json") else None
        if settings is not None:
            json_object(settings, "settings_json")
        ds = await self.catalog.update_dataset(
            _tenant(request), request.dataset_id, name=_given(request, "name"),
            description=_given(request, "description"), embedding_model=_given(request, "embedding_model"),
            settings=settings, pagerank=_given(request, "pagerank"))
        return rr_pb.UpdateDatasetResponse(dataset=convert.dataset_to_proto(ds))

    async def DeleteDataset(self, request: rr_pb.DeleteDatasetRequest, context: grpc.aio.ServicerContext) -> rr_pb.DeleteDatasetResponse:
        await self.parse_jobs.forget(_tenant(request), dataset_id=request.dataset_id)
        if not await self.backend.delete_dataset(_tenant(request), request.dataset_id):
            raise NotFound(f"dataset {request.dataset_id!r} not found")
        return rr_pb.DeleteDatasetResponse()

    # ------------------------------------------------------------------------------------ documents
    async def IngestDocument(self, request: rr_pb.IngestDocumentRequest, context: grpc.aio.ServicerContext) -> rr_pb.IngestDocumentResponse:
        tenant = _tenant(request)
        if not request.dataset_id:
            raise InvalidArgument("dataset_id is required")
        doc = await self.ingestor.ingest(
            tenant, request.dataset_id, document_id=request.document_id, name=request.name,
            mime_type=request.mime_type, content=request.content, metadata_json=request.metadata_json,
            store_only=request.store_only)
        return rr_pb.IngestDocumentResponse(document=convert.document_to_proto(doc))

    async def ParseDocuments(self, request: rr_pb.ParseDocumentsRequest, context: grpc.aio.ServicerContext) -> rr_pb.ParseDocumentsResponse:
        if not request.document_ids:
            raise InvalidArgument("document_ids is required (the documents to parse)")
        docs = await self.parse_jobs.start(_tenant(request), request.dataset_id, list(request.document_ids))
        return rr_pb.ParseDocumentsResponse(documents=[convert.document_to_proto(d) for d in docs])

    async def StopParsing(self, request: rr_pb.StopParsingRequest, context: grpc.aio.ServicerContext) -> rr_pb.StopParsingResponse:
        if not request.document_ids:
            raise InvalidArgument("document_ids is required (the documents to stop parsing)")
        stopped, idle = await self.parse_jobs.stop(_tenant(request), request.dataset_id, list(request.document_ids))
        return rr_pb.StopParsingResponse(stopped=[convert.document_to_proto(d) for d in stopped],
                                         not_running=[convert.document_to_proto(d) for d in idle])

    async def ListDocuments(self, request: rr_pb.ListDocumentsRequest, context: grpc.aio.ServicerContext) -> rr_pb.ListDocumentsResponse:
        tenant = _tenant(request)
        if await self.backend.get_dataset(tenant, request.dataset_id) is None:
            raise NotFound(f"dataset {request.dataset_id!r} not found")
        offset, limit = _page(request.page, request.page_size)
        if request.metadata_filter:  # the dataset's documents, newest first, then those that pass
            every = await self.backend.get_documents(tenant, [request.dataset_id])
            conditions = [MetadataCondition(c.key, c.operator, c.value) for c in request.metadata_filter]
            passing = metadata_filter.filter_documents(every, conditions, request.metadata_logic)
            kept = sorted((d for d in every if d.id in passing), key=lambda d: (-d.created_at, d.id))
            docs, total = kept[offset:offset + limit], len(kept)
        else:
            docs, total = await self.backend.list_documents(tenant, request.dataset_id, offset=offset, limit=limit)
        return rr_pb.ListDocumentsResponse(documents=[convert.document_to_proto(d) for d in docs], total=total)

    async def DeleteDocument(self, request: rr_pb.DeleteDocumentRequest, context: grpc.aio.ServicerContext) -> rr_pb.DeleteDocumentResponse:
        tenant = _tenant(request)
        if await self.backend.get_dataset(tenant, request.dataset_id) is None:
            raise NotFound(f"dataset {request.dataset_id!r} not found")
        await self.parse_jobs.forget(tenant, dataset_id=request.dataset_id, document_id=request.document_id)
        if not await self.backend.delete_document(tenant, request.dataset_id, request.document_id):
            raise NotFound(f"document {request.document_id!r} not found in dataset {request.dataset_id!r}")
        return rr_pb.DeleteDocumentResponse()

    async def UpdateDocument(self, request: rr_pb.UpdateDocumentRequest, context: grpc.aio.ServicerContext) -> rr_pb.UpdateDocumentResponse:
        settings = request.settings_json if request.HasField("settings_json") else None
        if settings is not None:
            json_object(settings, "settings_json")
        metadata = json_object(request.metadata_json, "metadata_json") if request.HasField("metadata_json") else None
        doc = await self.catalog.update_document(
            _tenant(request), request.dataset_id, request.document_id, name=_given(request, "name"), metadata=metadata,
            settings=settings, disabled=_given(request, "disabled"))
        return rr_pb.UpdateDocumentResponse(document=convert.document_to_proto(doc))

    async def GetDocumentFile(self, request: rr_pb.GetDocumentFileRequest, context: grpc.aio.ServicerContext) -> rr_pb.GetDocumentFileResponse:
        tenant = _tenant(request)
        found = await self.backend.get_documents(tenant, [request.dataset_id], [request.document_id])
        if not found:
            raise NotFound(f"document {request.document_id!r} not found in dataset {request.dataset_id!r}")
        content = await self.backend.get_file(tenant, request.dataset_id, request.document_id)
        return rr_pb.GetDocumentFileResponse(document=convert.document_to_proto(found[0]), content=content or b"")

    # ------------------------------------------------------------------------------------ search
    async def Search(self, request: rr_pb.SearchRequest, context: grpc.aio.ServicerContext) -> rr_pb.SearchResponse:
        result = await self.searcher.search(convert.search_params(_tenant(request), request))
        return rr_pb.SearchResponse(chunks=[convert.hit_to_proto(h) for h in result.hits], total=result.total)

    # ------------------------------------------------------------------------------------ chunks
    async def ListChunks(self, request: rr_pb.ListChunksRequest, context: grpc.aio.ServicerContext) -> rr_pb.ListChunksResponse:
        doc, chunks = await self.chunks.list(_tenant(request), request.dataset_id, request.document_id,
                                             keywords=request.keywords, chunk=request.chunk_id)
        offset, limit = _page(request.page, request.page_size)
        page = [_chunk(c, doc) for c in chunks[offset:offset + limit]]
        return rr_pb.ListChunksResponse(chunks=page, total=len(chunks), document=convert.document_to_proto(doc))

    async def AddChunk(self, request: rr_pb.AddChunkRequest, context: grpc.aio.ServicerContext) -> rr_pb.AddChunkResponse:
        tenant = _tenant(request)
        chunk = await self.chunks.add(tenant, request.dataset_id, request.document_id, request.content,
                                      json_object(request.extra_json, "extra_json"))
        _, doc = await self.chunks.document(tenant, request.dataset_id, request.document_id)
        return rr_pb.AddChunkResponse(chunk=_chunk(chunk, doc))

    async def UpdateChunk(self, request: rr_pb.UpdateChunkRequest, context: grpc.aio.ServicerContext) -> rr_pb.UpdateChunkResponse:
        tenant = _tenant(request)
        content = request.content if request.HasField("content") else None
        extra = json_object(request.extra_json, "extra_json") if request.HasField("extra_json") else None
        chunk = await self.chunks.update(tenant, request.dataset_id, request.document_id, request.chunk_id, content, extra)
        _, doc = await self.chunks.document(tenant, request.dataset_id, request.document_id)
        return rr_pb.UpdateChunkResponse(chunk=_chunk(chunk, doc))

    async def DeleteChunks(self, request: rr_pb.DeleteChunksRequest, context: grpc.aio.ServicerContext) -> rr_pb.DeleteChunksResponse:
        deleted = await self.chunks.delete(_tenant(request), request.dataset_id, request.document_id,
                                           list(request.chunk_ids), everything=request.all)
        return rr_pb.DeleteChunksResponse(deleted=deleted)


def _chunk(c: ChunkRecord, doc: Document) -> rr_pb.Chunk:
    return rr_pb.Chunk(id=c.id, content=c.content, document_id=doc.id, document_name=doc.name, dataset_id=doc.dataset_id,
                       positions=c.positions, extra_json=json.dumps(c.extra, ensure_ascii=False) if c.extra else "")
