"""RAGFlow's chunk endpoints, backed by the retrieval service:

    GET/POST/DELETE /api/v1/datasets/{dataset_id}/documents/{document_id}/chunks
    PATCH/PUT       /api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}  (0.22's SDK PUTs)

Validation, codes and messages follow RAGFlow's restful_apis/chunk_api.py. An added or changed chunk is
embedded with the dataset's model and searchable at once; its important_keywords, questions, tag_kwd and
`available` are kept with it (its extra_json): retrieval leaves out a chunk with `available: false` and
searches its keywords and questions beside its text.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.protocol import _Body, read_json
from gateway.ragflow_models import ListChunksQuery
from gateway.responses import ChunkAdded, ChunkList, ChunkOut, PartialDelete
from gateway.routes._datasets import (
    TAGS,
    data_error,
    document_view,
    documents,
    owned_dataset,
    retrieval,
    stored_chunk_view,
)
from gateway.routes._views import ok


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


def _chunk_extra(raw: dict[str, Any]) -> dict[str, Any]:
    """The chunk fields RAGFlow stores beside the text, as it normalizes them (questions stripped)."""
    extra = {k: raw[k] for k in ("important_keywords", "tag_kwd") if k in raw}
    if "questions" in raw:
        extra["questions"] = [str(q).strip() for q in raw["questions"] if str(q).strip()]
    if "available" in raw:
        extra["available"] = bool(raw["available"])
    return extra


async def _chunk_target(request: web.Request) -> tuple[str, str]:
    dataset_id, document_id = request.match_info["dataset_id"], request.match_info["document_id"]
    await owned_dataset(request, dataset_id)
    if document_id not in {d.id for d in await documents(request, dataset_id)}:
        raise data_error(f"you don't own the document {document_id}")
    return dataset_id, document_id


def _string_list(raw: dict[str, Any], key: str, *, must: str = "is required to be a list") -> None:
    if key in raw:
        if not isinstance(raw[key], list):
            raise data_error(f"`{key}` {must}")
        if not all(isinstance(k, str) for k in raw[key]):
            raise data_error(f"`{key}` must be a list of strings")


@endpoint(Dialect.RAGFLOW, contract=Contract("List a document's chunks", query=ListChunksQuery, response=ChunkList, tags=TAGS))
async def list_chunks(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    rv, q = retrieval(request), query(request)
    req = rr_pb.ListChunksRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id, page=q.page,
                                  page_size=q.page_size, keywords=q.keywords, chunk_id=q.id or "")
    resp = await rv.call(rv.rpc.ListChunks, req)
    if q.id and not resp.chunks:
        raise data_error(f"Chunk not found: {dataset_id}/{q.id}")
    dataset = await owned_dataset(request, dataset_id)
    return ok({"total": resp.total, "chunks": [stored_chunk_view(c) for c in resp.chunks],
               "doc": document_view(resp.document, dataset)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Get a chunk", response=ChunkOut, tags=TAGS))
async def get_chunk(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    rv, chunk_id = retrieval(request), request.match_info["chunk_id"]
    req = rr_pb.ListChunksRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id,
                                  chunk_id=chunk_id)
    found = (await rv.call(rv.rpc.ListChunks, req)).chunks
    if not found:
        raise data_error("Chunk not found!")
    view = stored_chunk_view(found[0])
    # RAGFlow answers the stored fields under its index's names beside the API's
    return ok({**view, "content_with_weight": view["content"], "doc_id": view["document_id"],
               "kb_id": view["dataset_id"], "important_kwd": view["important_keywords"],
               "question_kwd": view["questions"], "available_int": int(bool(view["available"]))})


@endpoint(Dialect.RAGFLOW, contract=Contract("Add a chunk to a document", body=AddChunkBody, response=ChunkAdded, tags=TAGS))
async def add_chunk(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    rv = retrieval(request)
    raw = await read_json(request)
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise data_error("`content` is required")
    for key in ("important_keywords", "questions", "tag_kwd"):
        _string_list(raw, key)
    await body(request)  # the declared model (the checks above gave RAGFlow's messages first)
    # the same content again is that chunk, written over (the retrieval service's rule, RAGFlow's ids)
    req = rr_pb.AddChunkRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id, content=content,
                                extra_json=json.dumps(_chunk_extra(raw), ensure_ascii=False))
    return ok({"chunk": stored_chunk_view((await rv.call(rv.rpc.AddChunk, req)).chunk)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Update a chunk", body=UpdateChunkBody, response=ChunkOut | None, tags=TAGS))
async def update_chunk(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    rv = retrieval(request)
    chunk_id = request.match_info["chunk_id"]
    raw = await read_json(request)
    content = raw.get("content")
    if content is not None and (not isinstance(content, str) or not content.strip()):
        raise data_error("`content` is required")
    for key in ("important_keywords", "questions", "tag_kwd"):
        if key in raw and not isinstance(raw[key], list):
            raise data_error(f"`{key}` should be a list")
    if "tag_kwd" in raw and not all(isinstance(k, str) for k in raw["tag_kwd"]):
        raise data_error("`tag_kwd` must be a list of strings")
    # RAGFlow answers these with the exception its code raises on them (code 100), so do we, word for word.
    for key in ("important_keywords", "questions"):
        bad = next((k for k in raw.get(key) or [] if not isinstance(k, str)), None)
        if bad is not None:
            raise GatewayError(f"TypeError: sequence item 0: expected str instance, {type(bad).__name__} found",
                               param=key, ragflow_code=100)
    if "available" in raw and not isinstance(raw["available"], (bool, int)):
        raise GatewayError(f"invalid literal for int() with base 10: {raw['available']!r}", param="available",
                           ragflow_code=100)
    await body(request)
    extra = _chunk_extra(raw)
    req = rr_pb.UpdateChunkRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id,
                                   chunk_id=chunk_id, content=content,
                                   extra_json=json.dumps(extra, ensure_ascii=False) if extra else None)
    try:
        await rv.call(rv.rpc.UpdateChunk, req)
    except GatewayError as err:
        if err.code == grpc.StatusCode.NOT_FOUND:
            raise data_error(f"Can't find this chunk {chunk_id}") from None
        raise
    return ok(None)


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete chunks", body=DeleteChunksBody, response=PartialDelete | None, tags=TAGS))
async def delete_chunks(request: web.Request) -> web.Response:
    dataset_id, document_id = await _chunk_target(request)
    req_body: DeleteChunksBody = await body(request)
    rv, tenant = retrieval(request), request[TENANT]
    if not req_body.chunk_ids:
        if req_body.delete_all is not True:
            return ok(None)
        req = rr_pb.DeleteChunksRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id, all=True)
        deleted = (await rv.call(rv.rpc.DeleteChunks, req)).deleted
        return ok(None, message=f"deleted {deleted} chunks")
    unique = list(dict.fromkeys(req_body.chunk_ids))
    duplicates = [f"Duplicate chunk ids: {i}" for i in unique if req_body.chunk_ids.count(i) > 1]
    req = rr_pb.DeleteChunksRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id, chunk_ids=unique)
    deleted = (await rv.call(rv.rpc.DeleteChunks, req)).deleted
    if deleted != len(unique):
        raise data_error(f"rm_chunk deleted chunks {deleted}, expect {len(unique)}")
    if duplicates:
        return ok({"success_count": deleted, "errors": duplicates},
                  message=f"Partially deleted {deleted} chunks with {len(duplicates)} errors")
    return ok(None, message=f"deleted {deleted} chunks")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks", list_chunks)
    r.add_post("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks", add_chunk)
    r.add_delete("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks", delete_chunks)
    r.add_get("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}", get_chunk)
    r.add_patch("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}", update_chunk)
    r.add_put("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}", update_chunk)  # ragflow-sdk 0.22
