"""RAGFlow's document-metadata routes, over the `meta_fields` the retrieval service keeps with each document:

    GET        /api/v1/datasets/{dataset_id}/metadata/summary         (each key's values and their counts)
    GET        /api/v1/datasets/metadata/flattened?dataset_ids=a,b    (key -> value -> document ids)
    PATCH      /api/v1/datasets/{dataset_id}/documents/metadatas      (batch update: selector, updates, deletes)
    POST       /api/v1/datasets/{dataset_id}/metadata/update          (the same, RAGFlow's older path)
    PUT        /api/v1/datasets/{dataset_id}/documents/{document_id}/metadata/config

Codes, messages and the update rules follow RAGFlow's document_api.py and DocMetadataService: a list value
counts each item, an update appends to a list and replaces anything else (or only what `match` names),
a delete drops the key (or only `value` from a list). As in RAGFlow's code, the documents a batch update
touches are those of `selector.document_ids` (narrowed by `metadata_condition`): none listed is none updated.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.protocol import read_json
from gateway.ragflow_models import deep_merge
from gateway.routes._datasets import (TAGS, data_error, dataset_view, document_view, documents, find_dataset, retrieval,
                                      settings_of)
from gateway.routes._views import ok

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")


class MetadataBatchBody(BaseModel):
    """What the batch update reads (its checks are RAGFlow's, in the handler)."""

    selector: dict[str, Any] | None = None  # {"document_ids": [...], "metadata_condition": {...}}
    updates: list[dict[str, Any]] | None = None  # [{"key", "value", "match"?}]
    deletes: list[dict[str, Any]] | None = None  # [{"key", "value"?}]


class MetadataConfigBody(BaseModel):
    metadata: Any = None


def _meta(doc: rr_pb.Document) -> dict[str, Any]:
    try:
        value = json.loads(doc.metadata_json) if doc.metadata_json else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


async def _dataset(request: web.Request, dataset_id: str, message: str) -> dict[str, Any]:
    found = await find_dataset(request, dataset_id)
    if found is None:
        raise data_error(message)
    return dataset_view(found)


# ---------------------------------------------------------------------------------------- summaries
def _value_type(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, list):
        return "list"
    if isinstance(v, bool):
        return "string"
    if isinstance(v, (int, float)):
        return "number"
    return "time" if isinstance(v, str) and _TIME.match(v) else "string"


def metadata_summary_of(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """RAGFlow's get_metadata_summary: per key, its most frequent value type and (value, count) pairs,
    the most frequent first; a list counts each of its items."""
    counts: dict[str, dict[str, int]] = {}
    types: dict[str, dict[str, int]] = {}
    for meta in metas:
        for k, v in meta.items():
            if (t := _value_type(v)) is not None:
                types.setdefault(k, {})[t] = types.setdefault(k, {}).get(t, 0) + 1
            for item in v if isinstance(v, list) else [v]:
                if item is not None:
                    counts.setdefault(k, {})[str(item)] = counts.setdefault(k, {}).get(str(item), 0) + 1
    return {k: {"type": max(types[k].items(), key=lambda kv: kv[1])[0] if types.get(k) else "string",
                "values": sorted(values.items(), key=lambda kv: kv[1], reverse=True)}
            for k, values in counts.items()}


def flattened(docs: list[rr_pb.Document]) -> dict[str, dict[str, list[str]]]:
    """RAGFlow's get_flatted_meta_by_kbs: key -> value (as text) -> the ids of the documents holding it."""
    out: dict[str, dict[str, list[str]]] = {}
    for doc in docs:
        for k, v in _meta(doc).items():
            field = out.setdefault(k, {})
            for item in v if isinstance(v, list) else [v]:
                if item is not None:
                    field.setdefault(str(item), []).append(doc.id)
    return out


@endpoint(Dialect.RAGFLOW, contract=Contract("A dataset's metadata keys, their values and counts", response=dict,
                                             tags=TAGS))
async def metadata_summary(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    await _dataset(request, dataset_id, f"You don't own the dataset {dataset_id}. ")
    wanted = {i for i in request.query.get("doc_ids", "").split(",") if i} or None
    docs = [d for d in await documents(request, dataset_id) if wanted is None or d.id in wanted]
    return ok({"summary": metadata_summary_of([_meta(d) for d in docs])})


@endpoint(Dialect.RAGFLOW, contract=Contract("Datasets' metadata: key -> value -> document ids", response=dict,
                                             tags=TAGS))
async def flattened_metadata(request: web.Request) -> web.Response:
    ids = [i for i in request.query.get("dataset_ids", "").split(",") if i]
    if not ids:
        raise data_error("Lack of dataset_ids in query parameters")
    docs: list[rr_pb.Document] = []
    for dataset_id in ids:
        if await find_dataset(request, dataset_id) is None:
            raise data_error(f"No authorization for dataset '{dataset_id}'")
        docs += await documents(request, dataset_id)
    return ok(flattened(docs))


async def listed_ids(request: web.Request, dataset_id: str) -> set[str] | None:
    """The documents the list route's `metadata_condition` and `metadata` query parameters (JSON) leave, None
    when neither filters (RAGFlow's _parse_doc_id_filter_with_metadata); `return_empty_metadata` drops both."""
    q = request.query
    try:
        condition = json.loads(q.get("metadata_condition", "{}"))
    except json.JSONDecodeError:
        raise data_error(f"metadata_condition must be valid JSON: {q.get('metadata_condition')}.") from None
    try:
        simple = json.loads(q.get("metadata", "{}"))
    except json.JSONDecodeError:
        raise data_error("metadata must be valid JSON.") from None
    empty_too = q.get("return_empty_metadata", "false").lower() == "true"
    if isinstance(simple, dict) and simple.get("empty_metadata"):
        empty_too, simple = True, {k: v for k, v in simple.items() if k != "empty_metadata"}
    if empty_too:
        return None
    if condition and not isinstance(condition, dict):
        raise data_error("metadata_condition must be an object.")
    if simple and not isinstance(simple, dict):
        raise data_error("metadata must be an object.")
    kept: set[str] | None = None
    if condition:
        kept = await _matching(request, dataset_id, condition)
    if simple:
        values = flattened(await documents(request, dataset_id))
        for key, wanted in simple.items():
            wanted = [str(v) for v in (wanted if isinstance(wanted, list) else [wanted]) if v is not None and str(v).strip()]
            if wanted:
                ids = {i for v in wanted for i in values.get(key, {}).get(v, [])}
                kept = ids if kept is None else kept & ids
    return kept


# ---------------------------------------------------------------------------------------- batch update
def _dedupe(values: list[Any]) -> list[Any]:
    seen: set[str] = set()
    return [v for v in values if not (str(v) in seen or seen.add(str(v)))]


def apply_updates(meta: dict[str, Any], updates: list[dict[str, Any]]) -> None:
    """RAGFlow's batch_update_metadata `_apply_updates`, in place."""
    for upd in updates:
        key, new = upd.get("key"), upd.get("value")
        if not key:
            continue
        match = upd.get("match")
        matching = match is not None and match != ""
        if key not in meta:
            if not matching:
                meta[key] = _dedupe(new) if isinstance(new, list) else new
        elif isinstance(meta[key], list):
            if not matching:
                meta[key] = _dedupe(meta[key] + (new if isinstance(new, list) else [new]))
            elif any(str(item) == str(match) for item in meta[key]):
                meta[key] = _dedupe([new if str(item) == str(match) else item for item in meta[key]])
        elif not matching or str(meta[key]) == str(match):
            meta[key] = new


def apply_deletes(meta: dict[str, Any], deletes: list[dict[str, Any]]) -> None:
    """RAGFlow's batch_update_metadata `_apply_deletes`, in place."""
    for d in deletes:
        key = d.get("key")
        if not key or key not in meta:
            continue
        value = d.get("value")
        if isinstance(meta[key], list) and value is not None:
            kept = [item for item in meta[key] if str(item) != str(value)]
            if kept:
                meta[key] = kept
            else:
                del meta[key]
        elif value is None or str(meta[key]) == str(value):
            del meta[key]


def _checked(raw: dict[str, Any]) -> tuple[list[str], dict[str, Any], list[dict], list[dict]]:
    """The body checked as RAGFlow checks it, each failure its 102 message."""
    selector = raw.get("selector", {}) or {}
    updates, deletes = raw.get("updates", []) or [], raw.get("deletes", []) or []
    if not isinstance(selector, dict):
        raise data_error("selector must be an object.")
    if not isinstance(updates, list) or not isinstance(deletes, list):
        raise data_error("updates and deletes must be lists.")
    condition = selector.get("metadata_condition", {}) or {}
    if condition and not isinstance(condition, dict):
        raise data_error("metadata_condition must be an object.")
    ids = selector.get("document_ids", []) or []
    if ids and not isinstance(ids, list):
        raise data_error("document_ids must be a list.")
    if any(not isinstance(u, dict) or not u.get("key") or "value" not in u for u in updates):
        raise data_error("Each update requires key and value.")
    if any(not isinstance(d, dict) or not d.get("key") for d in deletes):
        raise data_error("Each delete requires key.")
    return [str(i) for i in ids], condition, updates, deletes


async def _matching(request: web.Request, dataset_id: str, condition: dict[str, Any]) -> set[str]:
    """The dataset's documents whose metadata meets RAGFlow's metadata_condition (the retrieval service's
    filter, as its search applies it)."""
    conditions = [rr_pb.MetadataCondition(key=str(c.get("name", c.get("key", ""))),
                                          operator=str(c.get("comparison_operator", c.get("op", "="))),
                                          value=str(c.get("value", "")))
                  for c in condition.get("conditions") or [] if isinstance(c, dict)]
    if not conditions:
        return {d.id for d in await documents(request, dataset_id)}
    rv, found = retrieval(request), set()
    while True:
        req = rr_pb.ListDocumentsRequest(tenant_id=request[TENANT], dataset_id=dataset_id, page=len(found) // 1000 + 1,
                                         page_size=1000, metadata_filter=conditions,
                                         metadata_logic=str(condition.get("logic") or "and"))
        resp = await rv.call(rv.rpc.ListDocuments, req)
        found |= {d.id for d in resp.documents}
        if len(resp.documents) < 1000 or len(found) >= resp.total:
            return found


async def _batch_update(request: web.Request, not_yours: str) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    await _dataset(request, dataset_id, not_yours)
    ids, condition, updates, deletes = _checked(await read_json(request))
    every = {d.id: d for d in await documents(request, dataset_id)}
    if ids:
        if invalid := [i for i in dict.fromkeys(ids) if i not in every]:
            raise data_error(f"These documents do not belong to dataset {dataset_id}: {', '.join(invalid)}")
    targets = set(ids)
    if condition:
        targets &= await _matching(request, dataset_id, condition)
        if condition.get("conditions") and not targets:
            return ok({"updated": 0, "matched_docs": 0})
    rv, updated = retrieval(request), 0
    for doc_id in sorted(targets):
        meta = _meta(every[doc_id])
        new = copy.deepcopy(meta)
        apply_updates(new, updates)
        apply_deletes(new, deletes)
        if new == meta:
            continue
        req = rr_pb.UpdateDocumentRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=doc_id,
                                          metadata_json=json.dumps(new, ensure_ascii=False))
        await rv.call(rv.rpc.UpdateDocument, req)
        updated += 1
    return ok({"updated": updated, "matched_docs": len(targets)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Update documents' metadata in batch", body=MetadataBatchBody,
                                             response=dict[str, int], tags=TAGS))
async def update_metadatas(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    return await _batch_update(request, f"You don't own the dataset {dataset_id}.")


@endpoint(Dialect.RAGFLOW, contract=Contract("Update documents' metadata in batch (RAGFlow's older path)",
                                             body=MetadataBatchBody, response=dict[str, int], tags=TAGS))
async def metadata_batch_update(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    return await _batch_update(request, f"You don't own the dataset {dataset_id}. ")


# ---------------------------------------------------------------------------------------- a document's config
@endpoint(Dialect.RAGFLOW, contract=Contract("Set a document's metadata config (in its parser_config)",
                                             body=MetadataConfigBody, response=dict, tags=TAGS))
async def update_metadata_config(request: web.Request) -> web.Response:
    """RAGFlow's update_metadata_config: `metadata` merged into the document's parser_config (its raptor
    settings dropped, as RAGFlow's update_parser_config does); answers the document."""
    dataset_id, document_id = request.match_info["dataset_id"], request.match_info["document_id"]
    dataset = await _dataset(request, dataset_id, "you don't own the dataset")
    doc = next((d for d in await documents(request, dataset_id) if d.id == document_id), None)
    if doc is None:
        raise data_error(f"document {document_id} not found in dataset {dataset_id}")
    raw = await read_json(request)
    if "metadata" not in raw:
        raise GatewayError("metadata is required", param="metadata")
    settings = settings_of(doc)
    config = deep_merge(document_view(doc, dataset)["parser_config"], {"metadata": raw["metadata"]})
    config.pop("raptor", None)
    settings["parser_config"] = config
    rv = retrieval(request)
    req = rr_pb.UpdateDocumentRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id,
                                      settings_json=json.dumps(settings, ensure_ascii=False))
    updated = (await rv.call(rv.rpc.UpdateDocument, req)).document
    return ok(document_view(updated, dataset))


def add_routes(app: web.Application) -> None:
    """Before the dataset and document routes whose `{id}` segments would take these paths."""
    r = app.router
    r.add_get("/api/v1/datasets/metadata/flattened", flattened_metadata)
    r.add_get("/api/v1/datasets/{dataset_id}/metadata/summary", metadata_summary)
    r.add_post("/api/v1/datasets/{dataset_id}/metadata/update", metadata_batch_update)
    r.add_patch("/api/v1/datasets/{dataset_id}/documents/metadatas", update_metadatas)
    r.add_put("/api/v1/datasets/{dataset_id}/documents/{document_id}/metadata/config", update_metadata_config)
