"""RAGFlow's dataset, document, chunk and retrieval endpoints, backed by the retrieval service:

    POST/GET/DELETE /api/v1/datasets
    POST/GET/DELETE /api/v1/datasets/{dataset_id}/documents              (upload is multipart, field `file`)
    POST            /api/v1/datasets/{dataset_id}/chunks                 (parse: documents are parsed on upload)
    GET/POST/DELETE /api/v1/datasets/{dataset_id}/documents/{document_id}/chunks
    PATCH           /api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}
    POST            /api/v1/retrieval

Validation, defaults, codes and messages follow RAGFlow's restful_apis (dataset_api.py, document_api.py,
chunk_api.py): dataset bodies are strict (gateway/ragflow_models.py), a duplicate dataset or document
name gets "(1)" appended, an unsupported file type is refused. RAGFlow's own dataset settings (avatar,
permission, chunk_method, parser_config) are kept with the dataset in the retrieval service.
One difference: an upload is parsed, chunked and embedded before the response, so its documents come
back with `run` "DONE" (or "FAIL" and the reason in `progress_msg`) instead of "UNSTART"; the SDK's
parse-and-wait loop then finds them done at once.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import Any

import grpc
from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError, from_rpc_error
from gateway.protocol import _Body, read_json
from gateway.ragflow_models import (
    CreateDatasetBody,
    DeleteDatasetsBody,
    INT32_MAX,
    MAX_PAGE_SIZE,
    DeleteDocumentsBody,
    ListChunksQuery,
    ListDatasetsQuery,
    ListDocumentsQuery,
    merged_parser_config,
)
from gateway.responses import (
    ChunkAdded,
    ChunkList,
    ChunkOut,
    DatasetOut,
    DatasetsDeleted,
    DocumentList,
    DocumentOut,
    PartialDelete,
    RetrievalOut,
)
from gateway.routes._views import _date, ok

RPC_TIMEOUT_S = 30.0
INGEST_TIMEOUT_S = 900.0  # the local embedder takes a while on large files
MAX_FILE_BYTES = 64 * 1024 * 1024
FILE_NAME_LEN_LIMIT = 255  # bytes, as RAGFlow
_RUN = {rr_pb.DOCUMENT_STATUS_PENDING: "UNSTART", rr_pb.DOCUMENT_STATUS_RUNNING: "RUNNING",
        rr_pb.DOCUMENT_STATUS_DONE: "DONE", rr_pb.DOCUMENT_STATUS_FAILED: "FAIL"}
# RAGFlow's filename_type: a name matching none of these is "This type of file has not been supported yet!"
_SUPPORTED = re.compile(
    r".*\.(pdf|msg|eml|doc|docx|ppt|pptx|yml|xml|htm|json|jsonl|ldjson|csv|txt|ini|xls|xlsx|wps|rtf|hlp|pages|numbers|"
    r"key|md|mdx|py|js|java|c|cpp|h|php|go|ts|sh|cs|kt|html|sql|epub|wav|flac|ape|alac|wavpack|wv|mp3|aac|ogg|vorbis|"
    r"opus|jpg|jpeg|png|tif|gif|bmp|pcx|tga|exif|fpx|svg|psd|cdr|pcd|dxf|ufo|eps|ai|raw|wmf|webp|avif|apng|icon|ico|"
    r"mpg|mpeg|avi|rm|rmvb|mov|wmv|asf|dat|asx|wvx|mpe|mpa|mp4|mkv)$")
_TAGS = ("datasets",)


class ParseDocumentsBody(_Body):
    document_ids: list[str] | None = None


class RetrievalBody(_Body):
    question: str | None = None
    dataset_ids: list[str] | None = None
    document_ids: list[str] | None = None
    page: int = 1
    page_size: int = 30
    similarity_threshold: float = 0.2
    vector_similarity_weight: float = 0.3  # RAGFlow's API weighs the vector side (1 - keywords weight)
    top_k: int = 1024
    rerank_id: str | None = None
    keyword: bool | None = None
    highlight: bool | str | None = None
    metadata_condition: dict[str, Any] | None = None


class AddChunkBody(_Body):
    content: str | None = None
    important_keywords: list[str] | None = None
    questions: list[str] | None = None
    tag_kwd: list[str] | None = None


class UpdateChunkBody(_Body):
    content: str | None = None
    important_keywords: list[str] | None = None
    questions: list[str] | None = None
    tag_kwd: list[str] | None = None
    available: bool | None = None


class DeleteChunksBody(_Body):
    chunk_ids: list[str] | None = None
    delete_all: bool | None = None


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


def _data_error(message: str) -> GatewayError:
    """RAGFlow's get_error_data_result: code 102."""
    return GatewayError(message, code=grpc.StatusCode.NOT_FOUND)


def _next_name(name: str) -> str:
    """RAGFlow's duplicate_name step: `a.txt` -> `a(1).txt` -> `a(2).txt`."""
    path = PurePath(name)
    stem, suffix = (path.stem, path.suffix) if path.suffix and path.stem else (name, "")
    match = re.fullmatch(r"(.*)\((\d+)\)", stem)
    main, counter = (match.group(1), int(match.group(2))) if match else (stem, 0)
    return f"{main}({counter + 1}){suffix}"


def _settings(d: rr_pb.Dataset) -> dict[str, Any]:
    try:
        value = json.loads(d.settings_json) if d.settings_json else {}
    except json.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def dataset_view(d: rr_pb.Dataset) -> dict[str, Any]:
    created, settings = _ms(d.created_at), _settings(d)
    chunk_method = settings.get("chunk_method") or "naive"
    return {
        "id": d.id, "name": d.name, "avatar": settings.get("avatar"), "description": d.description or None,
        "embedding_model": d.embedding_model, "permission": settings.get("permission") or "me",
        "chunk_method": chunk_method, "parser_config": settings.get("parser_config") or merged_parser_config(chunk_method, None),
        "chunk_count": d.chunk_count, "document_count": d.document_count, "token_num": 0,
        "tenant_id": d.tenant_id, "created_by": d.tenant_id, "language": "English", "similarity_threshold": 0.2,
        "vector_similarity_weight": 0.3, "pagerank": 0, "status": "1", "create_time": created,
        "create_date": _date(created), "update_time": created, "update_date": _date(created),
    }


def document_view(doc: rr_pb.Document, dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    run = _RUN.get(doc.status, "UNSTART")
    created, updated = _ms(doc.created_at), _ms(doc.updated_at)
    parsed = run in ("DONE", "FAIL")
    return {
        "id": doc.id, "name": doc.name, "dataset_id": doc.dataset_id, "knowledgebase_id": doc.dataset_id,
        "chunk_method": (dataset or {}).get("chunk_method", "naive"),
        "parser_config": (dataset or {}).get("parser_config") or {"pages": [[1, 1000000]]},
        "source_type": "local", "type": doc.mime_type, "created_by": "", "size": doc.size,
        "token_count": 0, "chunk_count": doc.chunk_count, "progress": 1.0 if parsed else 0.0,
        "progress_msg": doc.error, "process_begin_at": _date(created) if parsed else None,
        "process_duration": max(updated - created, 0) / 1000 if parsed else 0.0, "run": run, "status": "1",
        "meta_fields": json.loads(doc.metadata_json) if doc.metadata_json else {}, "location": doc.name,
        "thumbnail": None, "create_time": created, "update_time": updated,
    }


def chunk_view(c: rr_pb.Chunk) -> dict[str, Any]:
    """A chunk as RAGFlow's retrieval answers it."""
    return {"id": c.id, "content": c.content, "document_id": c.document_id, "document_keyword": c.document_name,
            "document_name": c.document_name,  # what ragflow-sdk 0.22 reads (0.27 maps document_keyword itself)
            "kb_id": c.dataset_id, "dataset_id": c.dataset_id, "similarity": c.similarity,
            "vector_similarity": c.vector_similarity, "term_similarity": c.term_similarity,
            "positions": list(c.positions), "image_id": "", "important_keywords": [], "highlight": c.content}


def stored_chunk_view(c: rr_pb.Chunk) -> dict[str, Any]:
    """A chunk as RAGFlow's chunk routes answer it; keywords, questions, tags and `available` are what a
    client set on it (the retrieval service keeps them in the chunk's extra_json)."""
    extra = json.loads(c.extra_json) if c.extra_json else {}
    return {"id": c.id, "content": c.content, "document_id": c.document_id, "docnm_kwd": c.document_name,
            "document_keyword": c.document_name, "dataset_id": c.dataset_id,
            "important_keywords": extra.get("important_keywords", []), "questions": extra.get("questions", []),
            "tag_kwd": extra.get("tag_kwd", []), "image_id": "", "available": extra.get("available", True),
            "positions": list(c.positions)}


def _chunk_extra(raw: dict[str, Any]) -> dict[str, Any]:
    """The chunk fields RAGFlow stores beside the text, as it normalizes them (questions stripped)."""
    extra = {k: raw[k] for k in ("important_keywords", "tag_kwd") if k in raw}
    if "questions" in raw:
        extra["questions"] = [str(q).strip() for q in raw["questions"] if str(q).strip()]
    if "available" in raw:
        extra["available"] = bool(raw["available"])
    return extra


async def _dataset(request: web.Request, dataset_id: str) -> dict[str, Any]:
    """The tenant's dataset as a view; RAGFlow's "You don't own the dataset" (102) when it has none by that id."""
    for d in await _datasets(request):
        if d.id == dataset_id:
            return dataset_view(d)
    raise _data_error(f"You don't own the dataset {dataset_id}.")


async def _documents(request: web.Request, dataset_id: str) -> list[rr_pb.Document]:
    """Every document of the dataset (for names, ids and filters), a page of 1000 at a time."""
    docs: list[rr_pb.Document] = []
    while True:
        req = rr_pb.ListDocumentsRequest(tenant_id=request[TENANT], dataset_id=dataset_id, page=len(docs) // 1000 + 1,
                                         page_size=1000)
        resp = await _call(_stub(request).ListDocuments, req)
        docs += resp.documents
        if len(resp.documents) < 1000 or len(docs) >= resp.total:
            return docs


async def _datasets(request: web.Request) -> list[rr_pb.Dataset]:
    """Every dataset of the tenant, a page of 1000 at a time."""
    found: list[rr_pb.Dataset] = []
    while True:
        req = rr_pb.ListDatasetsRequest(tenant_id=request[TENANT], page=len(found) // 1000 + 1, page_size=1000)
        resp = await _call(_stub(request).ListDatasets, req)
        found += resp.datasets
        if len(resp.datasets) < 1000 or len(found) >= resp.total:
            return found


# ---------------------------------------------------------------------------------------- datasets
@endpoint(Dialect.RAGFLOW, contract=Contract("Create a dataset", body=CreateDatasetBody, response=DatasetOut, tags=_TAGS))
async def create_dataset(request: web.Request) -> web.Response:
    req_body: CreateDatasetBody = await body(request)
    given = req_body.parser_config_given()
    chunk_method = req_body.chunk_method or "naive"
    settings = {"avatar": req_body.avatar, "permission": req_body.permission, "chunk_method": chunk_method,
                "parser_config": merged_parser_config(chunk_method, given)}
    size = max(int((given or {}).get("chunk_token_num") or 0), 16) if given and "chunk_token_num" in given else 0
    name = req_body.name
    for _ in range(1000):  # RAGFlow: a taken name gets (1), (2), ... appended
        req = rr_pb.CreateDatasetRequest(tenant_id=request[TENANT], name=name, description=req_body.description or "",
                                         embedding_model=req_body.embedding_model or "", chunk_size=size,
                                         settings_json=json.dumps(settings, ensure_ascii=False))
        try:
            created = await _stub(request).CreateDataset(req, timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise from_rpc_error(exc, "retrieval service") from None
            name = _next_name(name)
            continue
        return ok(dataset_view(created.dataset))
    raise _data_error(f"Dataset name '{req_body.name}' already exists")


@endpoint(Dialect.RAGFLOW, contract=Contract("List datasets", query=ListDatasetsQuery, response=list[DatasetOut], tags=_TAGS))
async def list_datasets(request: web.Request) -> web.Response:
    """`data` is the list; the total is top-level `total_datasets` (RAGFlow) and `total`."""
    tenant, stub, q = request[TENANT], _stub(request), query(request)
    if q.id or q.name:
        items = [d for d in await _datasets(request) if (not q.id or d.id == q.id) and (not q.name or d.name == q.name)]
        if not items:
            raise _data_error(f"User '{tenant}' lacks permission for dataset '{q.id or q.name}'")
        views = [dataset_view(d) for d in items]
        return ok(views, total=len(views), total_datasets=len(views))
    resp = await _call(stub.ListDatasets, rr_pb.ListDatasetsRequest(tenant_id=tenant, page=q.page, page_size=q.page_size))
    return ok([dataset_view(d) for d in resp.datasets], total=resp.total, total_datasets=resp.total)


@endpoint(Dialect.RAGFLOW, contract=Contract("Get a dataset", response=DatasetOut, tags=_TAGS))
async def get_dataset(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    for d in await _datasets(request):
        if d.id == dataset_id:
            size = sum(doc.size for doc in await _documents(request, dataset_id))
            return ok({**dataset_view(d), "size": size, "connectors": []})
    raise _data_error(f"User '{request[TENANT]}' lacks permission for dataset '{dataset_id}'")


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete datasets", body=DeleteDatasetsBody, response=DatasetsDeleted, tags=_TAGS))
async def delete_datasets(request: web.Request) -> web.Response:
    """`ids` deletes those; no ids deletes nothing unless `delete_all` is true (RAGFlow's code; its docs say
    `null` means all, its code and tests do not)."""
    req_body: DeleteDatasetsBody = await body(request)
    tenant, stub = request[TENANT], _stub(request)
    owned = {d.id for d in await _datasets(request)}
    ids = list(req_body.ids or [])
    if not ids:
        if not req_body.delete_all:
            return ok({"success_count": 0})
        ids = sorted(owned)
    missing = [i for i in ids if i not in owned]
    if missing:
        raise _data_error(f"User '{tenant}' lacks permission for datasets: '{', '.join(missing)}'")
    for dataset_id in ids:
        await _call(stub.DeleteDataset, rr_pb.DeleteDatasetRequest(tenant_id=tenant, dataset_id=dataset_id))
    return ok({"success_count": len(ids)})


# ---------------------------------------------------------------------------------------- documents
async def _read_files(request: web.Request) -> list[tuple[str, str, bytes]]:
    if not request.content_type.startswith("multipart/"):
        raise GatewayError("No file part!", param="file")
    files: list[tuple[str, str, bytes]] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if getattr(part, "name", None) != "file":
            continue
        if not getattr(part, "filename", None):
            raise GatewayError("No file selected!", param="file")
        if len(part.filename.encode("utf-8")) > FILE_NAME_LEN_LIMIT:
            raise GatewayError(f"File name must be {FILE_NAME_LEN_LIMIT} bytes or less.", param="file")
        data = bytearray()
        while chunk := await part.read_chunk(1 << 20):
            data += chunk
            if len(data) > MAX_FILE_BYTES:
                raise GatewayError(f"file {part.filename!r} is larger than {MAX_FILE_BYTES // (1 << 20)} MB",
                                   code=grpc.StatusCode.RESOURCE_EXHAUSTED, param="file")
        files.append((part.filename, part.headers.get("Content-Type", ""), bytes(data)))
    if not files:
        raise GatewayError("No file part!", param="file")
    return files


@endpoint(Dialect.RAGFLOW, contract=Contract("Upload documents (parsed, chunked and embedded before the answer)",
                                             multipart=("file",), response=list[DocumentOut], tags=_TAGS))
async def upload_documents(request: web.Request) -> web.Response:
    tenant, stub, dataset_id = request[TENANT], _stub(request), request.match_info["dataset_id"]
    dataset = await _dataset(request, dataset_id)
    files = await _read_files(request)
    taken = {d.name for d in await _documents(request, dataset_id)}
    docs, errors = [], []
    for name, mime, content in files:
        if not _SUPPORTED.match(name.strip().lower()):
            errors.append(f"{name}: This type of file has not been supported yet!")
            continue
        while name in taken:
            name = _next_name(name)
        taken.add(name)
        mime = "" if mime in ("application/octet-stream", "") else mime
        req = rr_pb.IngestDocumentRequest(tenant_id=tenant, dataset_id=dataset_id, name=name, mime_type=mime, content=content)
        try:
            docs.append(document_view((await _call(stub.IngestDocument, req, INGEST_TIMEOUT_S)).document, dataset))
        except GatewayError as err:
            if err.code != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            errors.append(f"{name}: {err.message}")
    if errors:  # RAGFlow: code 500 with the per-file errors, and the documents that did upload as data
        err = GatewayError("\n".join(errors), param="file", ragflow_code=500)
        if not docs:
            raise err
        return web.json_response({"code": 500, "message": err.message, "data": docs})
    return ok(docs)


@endpoint(Dialect.RAGFLOW, contract=Contract("List documents", query=ListDocumentsQuery, response=DocumentList, tags=_TAGS))
async def list_documents(request: web.Request) -> web.Response:
    dataset_id, q = request.match_info["dataset_id"], query(request)
    try:
        dataset = await _dataset(request, dataset_id)
    except GatewayError:
        raise _data_error(f"You don't own the dataset {dataset_id}. ") from None
    if q.id or q.name or q.keywords:
        docs = [d for d in await _documents(request, dataset_id)
                if (not q.id or d.id == q.id) and (not q.name or d.name == q.name)
                and (not q.keywords or q.keywords.lower() in d.name.lower())]
        if not docs and (q.id or q.name):
            raise _data_error(f"you don't own the document {q.id or q.name}")
        total = len(docs)
        docs = docs[(q.page - 1) * q.page_size:q.page * q.page_size]
    else:
        req = rr_pb.ListDocumentsRequest(tenant_id=request[TENANT], dataset_id=dataset_id, page=q.page, page_size=q.page_size)
        resp = await _call(_stub(request).ListDocuments, req)
        docs, total = list(resp.documents), resp.total
    return ok({"docs": [document_view(d, dataset) for d in docs], "total": total})


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete documents", body=DeleteDocumentsBody, response=dict[str, int], tags=_TAGS))
async def delete_documents(request: web.Request) -> web.Response:
    req_body: DeleteDocumentsBody = await body(request)
    tenant, stub, dataset_id = request[TENANT], _stub(request), request.match_info["dataset_id"]
    try:
        await _dataset(request, dataset_id)
    except GatewayError:
        raise _data_error(f"You don't own the dataset {dataset_id}. ") from None
    ids = list(req_body.ids or [])
    if not req_body.delete_all and not ids:
        raise _data_error(f"should either provide doc ids or set delete_all(true), dataset: {dataset_id}. ")
    if ids and req_body.delete_all:
        raise _data_error(f"should not provide both doc ids and delete_all(true), dataset: {dataset_id}. ")
    known = [d.id for d in await _documents(request, dataset_id)]
    if req_body.delete_all:
        ids = known
    invalid = [i for i in ids if i not in known]
    if invalid:
        raise _data_error(f"These documents do not belong to dataset {dataset_id} or Document not found: {', '.join(invalid)}")
    for document_id in ids:
        await _call(stub.DeleteDocument, rr_pb.DeleteDocumentRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id))
    return ok({"deleted": len(ids)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Parse documents (already parsed on upload)", body=ParseDocumentsBody,
                                             response=PartialDelete | None, tags=_TAGS))
async def parse_documents(request: web.Request) -> web.Response:
    """Documents are parsed on upload; this checks them as RAGFlow does (ownership, unknown ids, duplicates)."""
    req_body: ParseDocumentsBody = await body(request)
    dataset_id = request.match_info["dataset_id"]
    await _dataset(request, dataset_id)
    if not req_body.document_ids:
        raise _data_error("`document_ids` is required")
    known = {d.id for d in await _documents(request, dataset_id)}
    unique = list(dict.fromkeys(req_body.document_ids))
    duplicates = [f"Duplicate document ids: {i}" for i in unique if req_body.document_ids.count(i) > 1]
    missing = [i for i in unique if i not in known]
    if missing:
        raise _data_error(f"Documents not found: {missing}")
    if duplicates:
        return ok({"success_count": len(unique), "errors": duplicates},
                  message=f"Partially parsed {len(unique)} documents with {len(duplicates)} errors")
    return ok(None)


# ---------------------------------------------------------------------------------------- chunks
async def _chunk_target(request: web.Request) -> tuple[str, str]:
    dataset_id, document_id = request.match_info["dataset_id"], request.match_info["document_id"]
    await _dataset(request, dataset_id)
    if document_id not in {d.id for d in await _documents(request, dataset_id)}:
        raise _data_error(f"you don't own the document {document_id}")
    return dataset_id, document_id


def _string_list(raw: dict[str, Any], key: str, *, must: str = "is required to be a list") -> None:
    if key in raw:
        if not isinstance(raw[key], list):
            raise _data_error(f"`{key}` {must}")
        if not all(isinstance(k, str) for k in raw[key]):
            raise _data_error(f"`{key}` must be a list of strings")


@endpoint(Dialect.RAGFLOW, contract=Contract("List a document's chunks", query=ListChunksQuery, response=ChunkList, tags=_TAGS))
async def list_chunks(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    q = query(request)
    req = rr_pb.ListChunksRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id, page=q.page,
                                  page_size=q.page_size, keywords=q.keywords, chunk_id=q.id or "")
    resp = await _call(_stub(request).ListChunks, req)
    if q.id and not resp.chunks:
        raise _data_error(f"Chunk not found: {dataset_id}/{q.id}")
    dataset = await _dataset(request, dataset_id)
    return ok({"total": resp.total, "chunks": [stored_chunk_view(c) for c in resp.chunks],
               "doc": document_view(resp.document, dataset)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Add a chunk to a document", body=AddChunkBody, response=ChunkAdded, tags=_TAGS))
async def add_chunk(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    raw = await read_json(request)
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise _data_error("`content` is required")
    for key in ("important_keywords", "questions", "tag_kwd"):
        _string_list(raw, key)
    await body(request)  # the declared model (the checks above gave RAGFlow's messages first)
    req = rr_pb.AddChunkRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id, content=content,
                                extra_json=json.dumps(_chunk_extra(raw), ensure_ascii=False))
    return ok({"chunk": stored_chunk_view((await _call(_stub(request).AddChunk, req)).chunk)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Update a chunk", body=UpdateChunkBody, response=ChunkOut | None, tags=_TAGS))
async def update_chunk(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    chunk_id = request.match_info["chunk_id"]
    raw = await read_json(request)
    content = raw.get("content")
    if content is not None and (not isinstance(content, str) or not content.strip()):
        raise _data_error("`content` is required")
    for key in ("important_keywords", "questions", "tag_kwd"):
        _string_list(raw, key, must="should be a list")
    if "available" in raw and not isinstance(raw["available"], (bool, int)):
        raise GatewayError("`available` must be a boolean or 0/1", param="available")
    await body(request)
    extra = _chunk_extra(raw)
    req = rr_pb.UpdateChunkRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id,
                                   chunk_id=chunk_id, content=content,
                                   extra_json=json.dumps(extra, ensure_ascii=False) if extra else None)
    try:
        await _stub(request).UpdateChunk(req, timeout=RPC_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            raise _data_error(f"Can't find this chunk {chunk_id}") from None
        raise from_rpc_error(exc, "retrieval service") from None
    return ok(None)


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete chunks", body=DeleteChunksBody, response=PartialDelete | None, tags=_TAGS))
async def delete_chunks(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    req_body: DeleteChunksBody = await body(request)
    stub, tenant = _stub(request), request[TENANT]
    if not req_body.chunk_ids:
        if req_body.delete_all is not True:
            return ok(None)
        req = rr_pb.DeleteChunksRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id, all=True)
        deleted = (await _call(stub.DeleteChunks, req)).deleted
        return ok(None, message=f"deleted {deleted} chunks")
    unique = list(dict.fromkeys(req_body.chunk_ids))
    duplicates = [f"Duplicate chunk ids: {i}" for i in unique if req_body.chunk_ids.count(i) > 1]
    req = rr_pb.DeleteChunksRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id, chunk_ids=unique)
    deleted = (await _call(stub.DeleteChunks, req)).deleted
    if deleted != len(unique):
        raise _data_error(f"rm_chunk deleted chunks {deleted}, expect {len(unique)}")
    if duplicates:
        return ok({"success_count": deleted, "errors": duplicates},
                  message=f"Partially deleted {deleted} chunks with {len(duplicates)} errors")
    return ok(None, message=f"deleted {deleted} chunks")


# ---------------------------------------------------------------------------------------- retrieval
@endpoint(Dialect.RAGFLOW, contract=Contract("Retrieve chunks from datasets", body=RetrievalBody, response=RetrievalOut,
                                             tags=_TAGS))
async def retrieval(request: web.Request) -> web.Response:
    raw = await read_json(request)
    if not raw.get("dataset_ids"):
        raise _data_error("`dataset_ids` is required.")
    if not isinstance(raw["dataset_ids"], list):
        raise _data_error("`dataset_ids` should be a list")
    if "question" not in raw:
        raise _data_error("`question` is required.")
    if "document_ids" in raw and raw["document_ids"] is not None and not isinstance(raw["document_ids"], list):
        raise _data_error("`documents` should be a list")
    req_body: RetrievalBody = await body(request)
    owned = {d.id for d in await _datasets(request)}
    for dataset_id in req_body.dataset_ids or []:
        if dataset_id not in owned:
            raise _data_error(f"You don't own the dataset {dataset_id}.")
    if req_body.top_k <= 0:
        raise _data_error("`top_k` must be greater than 0")
    if not 0.0 <= req_body.vector_similarity_weight <= 1.0:
        raise GatewayError("`vector_similarity_weight` must be between 0 and 1", param="vector_similarity_weight")
    question = (req_body.question or "").strip()
    if not question:
        return ok({"total": 0, "chunks": [], "doc_aggs": []})
    size = req_body.page_size if 1 <= req_body.page_size <= MAX_PAGE_SIZE else 30
    page = min(req_body.page, INT32_MAX // size) if req_body.page >= 1 else 1  # page * size goes in an int32
    doc_ids = list(req_body.document_ids or [])
    if doc_ids:
        listed = set()
        for dataset_id in req_body.dataset_ids or []:
            listed |= {d.id for d in await _documents(request, dataset_id)}
        for doc_id in doc_ids:
            if doc_id not in listed:
                raise _data_error(f"The datasets don't own the document {doc_id}")
    conditions = []
    meta = req_body.metadata_condition or {}
    for c in meta.get("conditions") or []:
        if isinstance(c, dict) and c.get("name", c.get("key")):
            conditions.append(rr_pb.MetadataCondition(key=str(c.get("name", c.get("key"))),
                                                      operator=str(c.get("comparison_operator", c.get("op", "="))),
                                                      value=str(c.get("value", ""))))
    req = rr_pb.SearchRequest(
        tenant_id=request[TENANT], query=question, dataset_ids=req_body.dataset_ids, document_ids=doc_ids,
        top_n=page * size, top_k=min(req_body.top_k, INT32_MAX), similarity_threshold=req_body.similarity_threshold,
        keywords_similarity_weight=1.0 - req_body.vector_similarity_weight, rerank_model=req_body.rerank_id or "",
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
    r.add_get("/api/v1/datasets/{dataset_id}", get_dataset)
    r.add_post("/api/v1/datasets/{dataset_id}/documents", upload_documents)
    r.add_get("/api/v1/datasets/{dataset_id}/documents", list_documents)
    r.add_delete("/api/v1/datasets/{dataset_id}/documents", delete_documents)
    r.add_post("/api/v1/datasets/{dataset_id}/chunks", parse_documents)
    r.add_get("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks", list_chunks)
    r.add_post("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks", add_chunk)
    r.add_delete("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks", delete_chunks)
    r.add_patch("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}", update_chunk)
    r.add_put("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}", update_chunk)  # ragflow-sdk 0.22
    r.add_post("/api/v1/retrieval", retrieval)
