"""RAGFlow's dataset, document and retrieval endpoints, backed by the retrieval service:

    POST/GET/DELETE /api/v1/datasets
    POST/GET/DELETE /api/v1/datasets/{dataset_id}/documents     (upload is multipart, field `file`)
    POST            /api/v1/datasets/{dataset_id}/chunks        (parse: a no-op, upload already parsed)
    POST            /api/v1/retrieval

Same `{code, message, data}` envelopes as RAGFlow. One difference: an upload is parsed, chunked and
embedded before the response, so its documents come back with `run` "DONE" (or "FAIL" and the reason in
`progress_msg`) instead of "UNSTART"; the SDK's parse-and-wait loop then finds them done at once.
Register with `datasets.add_routes(app)`.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError, from_rpc_error
from gateway.protocol import query_int, read_body
from gateway.routes._views import ok

RPC_TIMEOUT_S = 30.0
INGEST_TIMEOUT_S = 900.0  # the local embedder takes a while on large files
MAX_FILE_BYTES = 64 * 1024 * 1024
_RUN = {rr_pb.DOCUMENT_STATUS_PENDING: "UNSTART", rr_pb.DOCUMENT_STATUS_RUNNING: "RUNNING",
        rr_pb.DOCUMENT_STATUS_DONE: "DONE", rr_pb.DOCUMENT_STATUS_FAILED: "FAIL"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # RAGFlow clients send fields we do not use


class CreateDatasetBody(_Body):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    embedding_model: str | None = None
    parser_config: dict[str, Any] | None = None


class IdsBody(_Body):
    ids: list[str] | None = None
    delete_all: bool = False


class ParseBody(_Body):
    document_ids: list[str] = Field(default_factory=list)


class RetrievalBody(_Body):
    question: str = ""
    dataset_ids: list[str] = Field(default_factory=list)
    document_ids: list[str] = Field(default_factory=list)
    page: int = 1
    page_size: int = 30
    similarity_threshold: float = 0.2
    vector_similarity_weight: float = 0.3  # RAGFlow's API weighs the vector side (1 - keywords weight)
    top_k: int = 1024
    rerank_id: str | None = None
    metadata_condition: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------- helpers
def _stub(request: web.Request) -> rr_grpc.RetrievalServiceStub:
    from gateway.app import UPSTREAMS  # here, not at import: gateway.app imports the route modules

    return rr_grpc.RetrievalServiceStub(request.app[UPSTREAMS].channels["retrieval"])


async def _call(method: Any, req: Any, timeout: float = RPC_TIMEOUT_S) -> Any:
    try:
        return await method(req, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc, "retrieval service") from None


def _ms(ts: Any) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def dataset_view(d: rr_pb.Dataset) -> dict[str, Any]:
    created = _ms(d.created_at)
    return {
        "id": d.id, "name": d.name, "avatar": None, "description": d.description or None,
        "embedding_model": d.embedding_model, "permission": "me", "chunk_method": "naive",
        "parser_config": {"chunk_token_num": d.chunk_size, "overlap_token_num": d.chunk_overlap, "delimiter": "\n"},
        "chunk_count": d.chunk_count, "document_count": d.document_count, "token_num": 0,
        "tenant_id": d.tenant_id, "created_by": d.tenant_id, "language": "English", "similarity_threshold": 0.2,
        "vector_similarity_weight": 0.3, "pagerank": 0, "status": "1", "create_time": created, "update_time": created,
    }


def document_view(doc: rr_pb.Document) -> dict[str, Any]:
    run = _RUN.get(doc.status, "UNSTART")
    return {
        "id": doc.id, "name": doc.name, "dataset_id": doc.dataset_id, "knowledgebase_id": doc.dataset_id,
        "type": doc.mime_type, "size": doc.size, "chunk_count": doc.chunk_count, "token_count": 0,
        "run": run, "status": "1", "progress": 1.0 if run in ("DONE", "FAIL") else 0.0, "progress_msg": doc.error,
        "chunk_method": "naive", "meta_fields": json.loads(doc.metadata_json) if doc.metadata_json else {},
        "location": doc.name, "source_type": "local", "thumbnail": None,
        "create_time": _ms(doc.created_at), "update_time": _ms(doc.updated_at),
    }


def chunk_view(c: rr_pb.Chunk) -> dict[str, Any]:
    return {"id": c.id, "content": c.content, "document_id": c.document_id, "document_keyword": c.document_name,
            "kb_id": c.dataset_id, "dataset_id": c.dataset_id, "similarity": c.similarity,
            "vector_similarity": c.vector_similarity, "term_similarity": c.term_similarity,
            "positions": list(c.positions), "image_id": "", "important_keywords": [], "highlight": c.content}


# ---------------------------------------------------------------------------------------- datasets
@endpoint(Dialect.RAGFLOW)
async def create_dataset(request: web.Request) -> web.Response:
    body = await read_body(request, CreateDatasetBody)
    cfg = body.parser_config or {}
    try:
        size = int(cfg.get("chunk_token_num") or 0)
        overlap = int(cfg.get("overlap_token_num") or 0)
    except (TypeError, ValueError):
        raise GatewayError("parser_config.chunk_token_num must be an integer", param="parser_config") from None
    req = rr_pb.CreateDatasetRequest(tenant_id=request[TENANT], name=body.name.strip(), description=body.description or "",
                                     embedding_model=body.embedding_model or "", chunk_size=size, chunk_overlap=overlap)
    return ok(dataset_view((await _call(_stub(request).CreateDataset, req)).dataset))


@endpoint(Dialect.RAGFLOW)
async def list_datasets(request: web.Request) -> web.Response:
    tenant, stub = request[TENANT], _stub(request)
    req = rr_pb.ListDatasetsRequest(tenant_id=tenant, page=query_int(request, "page", 1),
                                    page_size=query_int(request, "page_size", 30), name=request.query.get("name", ""))
    resp = await _call(stub.ListDatasets, req)
    items = [d for d in resp.datasets if not request.query.get("id") or d.id == request.query["id"]]
    if request.query.get("id") and not items:
        raise GatewayError("You don't own the dataset.", code=grpc.StatusCode.PERMISSION_DENIED)
    return ok([dataset_view(d) for d in items], total=len(items) if request.query.get("id") else resp.total)


@endpoint(Dialect.RAGFLOW)
async def delete_datasets(request: web.Request) -> web.Response:
    body = await read_body(request, IdsBody)
    tenant, stub = request[TENANT], _stub(request)
    ids = list(body.ids or [])
    if body.delete_all:
        ids = [d.id for d in (await _call(stub.ListDatasets, rr_pb.ListDatasetsRequest(tenant_id=tenant, page_size=1000))).datasets]
    elif not ids:
        raise GatewayError("`ids` is required (or `delete_all: true`)", param="ids")
    for dataset_id in ids:
        await _call(stub.DeleteDataset, rr_pb.DeleteDatasetRequest(tenant_id=tenant, dataset_id=dataset_id))
    return ok(True)


# ---------------------------------------------------------------------------------------- documents
@endpoint(Dialect.RAGFLOW)
async def upload_documents(request: web.Request) -> web.Response:
    tenant, stub, dataset_id = request[TENANT], _stub(request), request.match_info["dataset_id"]
    if not request.content_type.startswith("multipart/"):
        raise GatewayError("upload documents as multipart/form-data with one or more `file` fields", param="file")
    files: list[tuple[str, str, bytes]] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if part.name != "file" or not getattr(part, "filename", None):
            continue
        data = bytearray()
        while chunk := await part.read_chunk(1 << 20):
            data += chunk
            if len(data) > MAX_FILE_BYTES:
                raise GatewayError(f"file {part.filename!r} is larger than {MAX_FILE_BYTES // (1 << 20)} MB",
                                   code=grpc.StatusCode.RESOURCE_EXHAUSTED, param="file")
        files.append((part.filename, part.headers.get("Content-Type", ""), bytes(data)))
    if not files:
        raise GatewayError("No file part!", param="file")
    docs = []
    for name, mime, content in files:
        mime = "" if mime in ("application/octet-stream", "") else mime
        req = rr_pb.IngestDocumentRequest(tenant_id=tenant, dataset_id=dataset_id, name=name, mime_type=mime, content=content)
        docs.append(document_view((await _call(stub.IngestDocument, req, INGEST_TIMEOUT_S)).document))
    return ok(docs)


@endpoint(Dialect.RAGFLOW)
async def list_documents(request: web.Request) -> web.Response:
    tenant, stub, dataset_id = request[TENANT], _stub(request), request.match_info["dataset_id"]
    req = rr_pb.ListDocumentsRequest(tenant_id=tenant, dataset_id=dataset_id, page=query_int(request, "page", 1),
                                     page_size=query_int(request, "page_size", 30))
    resp = await _call(stub.ListDocuments, req)
    docs = [document_view(d) for d in resp.documents]
    want_id, want_name = request.query.get("id"), request.query.get("name")
    if want_id or want_name:
        docs = [d for d in docs if (not want_id or d["id"] == want_id) and (not want_name or d["name"] == want_name)]
        return ok({"docs": docs, "total": len(docs)})
    return ok({"docs": docs, "total": resp.total})


@endpoint(Dialect.RAGFLOW)
async def delete_documents(request: web.Request) -> web.Response:
    body = await read_body(request, IdsBody)
    tenant, stub, dataset_id = request[TENANT], _stub(request), request.match_info["dataset_id"]
    ids = list(body.ids or [])
    if body.delete_all or body.ids is None:  # RAGFlow: no ids deletes every document of the dataset
        listed = await _call(stub.ListDocuments, rr_pb.ListDocumentsRequest(tenant_id=tenant, dataset_id=dataset_id, page_size=1000))
        ids = [d.id for d in listed.documents]
    for document_id in ids:
        await _call(stub.DeleteDocument, rr_pb.DeleteDocumentRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id))
    return ok(True)


@endpoint(Dialect.RAGFLOW)
async def parse_documents(request: web.Request) -> web.Response:
    """Documents are parsed on upload; this checks they exist (RAGFlow's answer to unknown ids is an error)."""
    body = await read_body(request, ParseBody)
    tenant, stub, dataset_id = request[TENANT], _stub(request), request.match_info["dataset_id"]
    listed = await _call(stub.ListDocuments, rr_pb.ListDocumentsRequest(tenant_id=tenant, dataset_id=dataset_id, page_size=1000))
    known = {d.id for d in listed.documents}
    missing = [d for d in body.document_ids if d not in known]
    if missing:
        raise GatewayError(f"Documents not found: {missing}", code=grpc.StatusCode.NOT_FOUND, param="document_ids")
    return ok(True)


# ---------------------------------------------------------------------------------------- retrieval
@endpoint(Dialect.RAGFLOW)
async def retrieval(request: web.Request) -> web.Response:
    body = await read_body(request, RetrievalBody)
    if not body.dataset_ids:
        raise GatewayError("`dataset_ids` is required", param="dataset_ids")
    if not 0.0 <= body.vector_similarity_weight <= 1.0:
        raise GatewayError("`vector_similarity_weight` must be between 0 and 1", param="vector_similarity_weight")
    page, size = max(body.page, 1), max(body.page_size, 1)
    conditions = []
    meta = body.metadata_condition or {}
    for c in meta.get("conditions") or []:
        if isinstance(c, dict) and c.get("name", c.get("key")):
            conditions.append(rr_pb.MetadataCondition(key=str(c.get("name", c.get("key"))),
                                                      operator=str(c.get("comparison_operator", c.get("op", "="))),
                                                      value=str(c.get("value", ""))))
    req = rr_pb.SearchRequest(
        tenant_id=request[TENANT], query=body.question, dataset_ids=body.dataset_ids, document_ids=body.document_ids,
        top_n=page * size, top_k=body.top_k, similarity_threshold=body.similarity_threshold,
        keywords_similarity_weight=1.0 - body.vector_similarity_weight, rerank_model=body.rerank_id or "",
        metadata_filter=conditions, metadata_logic=str(meta.get("logic") or "and"))
    resp = await _call(_stub(request).Search, req)
    chunks = list(resp.chunks)[(page - 1) * size:]
    aggs: dict[str, dict[str, Any]] = {}
    for c in chunks:
        agg = aggs.setdefault(c.document_id, {"doc_name": c.document_name, "doc_id": c.document_id, "count": 0})
        agg["count"] += 1
    return ok({"chunks": [chunk_view(c) for c in chunks], "doc_aggs": sorted(aggs.values(), key=lambda a: -a["count"]),
               "total": resp.total})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/v1/datasets", create_dataset)
    r.add_get("/api/v1/datasets", list_datasets)
    r.add_delete("/api/v1/datasets", delete_datasets)
    r.add_post("/api/v1/datasets/{dataset_id}/documents", upload_documents)
    r.add_get("/api/v1/datasets/{dataset_id}/documents", list_documents)
    r.add_delete("/api/v1/datasets/{dataset_id}/documents", delete_documents)
    r.add_post("/api/v1/datasets/{dataset_id}/chunks", parse_documents)
    r.add_post("/api/v1/retrieval", retrieval)
