"""What the dataset, document, chunk and retrieval routes share: retrieval messages -> RAGFlow's JSON
objects, RAGFlow's data error, its duplicate-name rule, and the tenant's dataset and document lookups."""

from __future__ import annotations

import json
import re
import time
from pathlib import PurePath
from typing import Any

import grpc
from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.endpoint import TENANT
from gateway.errors import GatewayError
from gateway.ragflow_models import merged_parser_config
from gateway.retrieval import RETRIEVAL, Retrieval
from gateway.routes._views import _date

TAGS = ("datasets",)
_RUN = {rr_pb.DOCUMENT_STATUS_PENDING: "UNSTART", rr_pb.DOCUMENT_STATUS_RUNNING: "RUNNING",
        rr_pb.DOCUMENT_STATUS_DONE: "DONE", rr_pb.DOCUMENT_STATUS_FAILED: "FAIL",
        rr_pb.DOCUMENT_STATUS_CANCELLED: "CANCEL"}


def retrieval(request: web.Request) -> Retrieval:
    return request.app[RETRIEVAL]


def data_error(message: str) -> GatewayError:
    """RAGFlow's get_error_data_result: code 102."""
    return GatewayError(message, code=grpc.StatusCode.NOT_FOUND)


def next_name(name: str) -> str:
    """RAGFlow's duplicate_name step: `a.txt` -> `a(1).txt` -> `a(2).txt`."""
    path = PurePath(name)
    stem, suffix = (path.stem, path.suffix) if path.suffix and path.stem else (name, "")
    match = re.fullmatch(r"(.*)\((\d+)\)", stem)
    main, counter = (match.group(1), int(match.group(2))) if match else (stem, 0)
    return f"{main}({counter + 1}){suffix}"


def _ms(ts: Any) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def settings_of(message: rr_pb.Dataset | rr_pb.Document) -> dict[str, Any]:
    """The RAGFlow settings the gateway stored with a dataset or document (`settings_json`)."""
    try:
        value = json.loads(message.settings_json) if message.settings_json else {}
    except json.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def dataset_view(d: rr_pb.Dataset) -> dict[str, Any]:
    created, settings = _ms(d.created_at), settings_of(d)
    updated = _ms(d.updated_at) or created
    chunk_method = settings.get("chunk_method") or "naive"
    return {
        "id": d.id, "name": d.name, "avatar": settings.get("avatar"), "description": d.description or None,
        "embedding_model": d.embedding_model, "permission": settings.get("permission") or "me",
        "chunk_method": chunk_method, "parser_config": settings.get("parser_config") or merged_parser_config(chunk_method, None),
        "chunk_count": d.chunk_count, "document_count": d.document_count, "token_num": 0,
        "tenant_id": d.tenant_id, "created_by": d.tenant_id, "language": settings.get("language") or "English",
        "similarity_threshold": 0.2, "vector_similarity_weight": 0.3, "pagerank": d.pagerank,
        "status": "1", "create_time": created, "create_date": _date(created), "update_time": updated,
        "update_date": _date(updated),
    }


def document_view(doc: rr_pb.Document, dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """A document as RAGFlow's document routes answer it; its own chunk_method and parser_config (set by an
    update) over its dataset's."""
    run = _RUN.get(doc.status, "UNSTART")
    created, updated = _ms(doc.created_at), _ms(doc.updated_at)
    parsed = run in ("DONE", "FAIL")
    own = settings_of(doc)
    # RAGFlow's progress log: its last line says how the parse ended
    message = {"DONE": f"{_clock(updated)} Task done", "FAIL": f"{_clock(updated)} [ERROR]{doc.error}",
               "CANCEL": f"{_clock(updated)} {doc.error or 'Task stopped by user.'}",
               "RUNNING": f"{_clock(updated)} Task has been received."}.get(run, "")
    return {
        "id": doc.id, "name": doc.name, "dataset_id": doc.dataset_id, "knowledgebase_id": doc.dataset_id,
        "chunk_method": own.get("chunk_method") or (dataset or {}).get("chunk_method", "naive"),
        "parser_config": own.get("parser_config") or (dataset or {}).get("parser_config") or {"pages": [[1, 1000000]]},
        "source_type": "local", "type": doc.mime_type, "created_by": "", "size": doc.size,
        "token_count": 0, "chunk_count": doc.chunk_count, "progress": 1.0 if run == "DONE" else -1.0 if run == "FAIL" else 0.0,
        "progress_msg": message, "process_begin_at": _date(updated) if run != "UNSTART" else None,
        "process_duration": max(updated - created, 0) / 1000 if parsed else 0.0, "run": run,
        "status": "0" if doc.disabled else "1",
        "meta_fields": json.loads(doc.metadata_json) if doc.metadata_json else {}, "location": doc.name,
        "thumbnail": None, "create_time": created, "update_time": updated,
    }


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _extra(c: rr_pb.Chunk) -> dict[str, Any]:
    return json.loads(c.extra_json) if c.extra_json else {}


def chunk_view(c: rr_pb.Chunk) -> dict[str, Any]:
    """A chunk as RAGFlow's retrieval answers it."""
    return {"id": c.id, "content": c.content, "document_id": c.document_id, "document_keyword": c.document_name,
            "document_name": c.document_name,  # what ragflow-sdk 0.22 reads (0.27 maps document_keyword itself)
            "kb_id": c.dataset_id, "dataset_id": c.dataset_id, "similarity": c.similarity,
            "vector_similarity": c.vector_similarity, "term_similarity": c.term_similarity,
            "positions": list(c.positions), "image_id": "", "important_keywords": _extra(c).get("important_keywords", []),
            "highlight": c.content}


def stored_chunk_view(c: rr_pb.Chunk) -> dict[str, Any]:
    """A chunk as RAGFlow's chunk routes answer it; keywords, questions, tags and `available` are what a
    client set on it (the retrieval service keeps them in the chunk's extra_json)."""
    extra = _extra(c)
    return {"id": c.id, "content": c.content, "document_id": c.document_id, "docnm_kwd": c.document_name,
            "document_keyword": c.document_name, "dataset_id": c.dataset_id,
            "important_keywords": extra.get("important_keywords", []), "questions": extra.get("questions", []),
            "tag_kwd": extra.get("tag_kwd", []), "image_id": "", "available": extra.get("available", True),
            "positions": list(c.positions)}


async def owned_datasets(request: web.Request) -> list[rr_pb.Dataset]:
    return await retrieval(request).datasets(request[TENANT])


async def find_dataset(request: web.Request, dataset_id: str) -> rr_pb.Dataset | None:
    return next((d for d in await owned_datasets(request) if d.id == dataset_id), None)


async def owned_dataset(request: web.Request, dataset_id: str) -> dict[str, Any]:
    """The tenant's dataset as a view; RAGFlow's "You don't own the dataset" (102) when it has none by that id."""
    found = await find_dataset(request, dataset_id)
    if found is None:
        raise data_error(f"You don't own the dataset {dataset_id}.")
    return dataset_view(found)


async def documents(request: web.Request, dataset_id: str) -> list[rr_pb.Document]:
    return await retrieval(request).documents(request[TENANT], dataset_id)
