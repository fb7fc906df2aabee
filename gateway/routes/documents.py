"""RAGFlow's document endpoints, backed by the retrieval service:

    POST/GET/DELETE /api/v1/datasets/{dataset_id}/documents              (upload is multipart, field `file`)
    GET             /api/v1/datasets/{dataset_id}/documents/{document_id}  (download the uploaded file)
    PUT/PATCH       /api/v1/datasets/{dataset_id}/documents/{document_id}  (update; 0.22's SDK PUTs, today's PATCHes)
    POST/DELETE     /api/v1/datasets/{dataset_id}/chunks                 (parse, stop parsing)

Validation, codes and messages follow RAGFlow's restful_apis/document_api.py: a duplicate upload name gets
"(1)" appended, an unsupported file type is refused. Two differences: an upload is parsed, chunked and
embedded before the response, so its documents come back with `run` "DONE" (or "FAIL" and the reason in
`progress_msg`) instead of "UNSTART", and the SDK's parse-and-wait loop finds them done at once; and a
changed `chunk_method` is recorded without re-parsing (RAGFlow deletes the chunks for a re-parse).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

import grpc
from aiohttp import web
from pydantic import ValidationError
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.protocol import _Body, read_json
from gateway.ragflow_models import (
    DeleteDocumentsBody,
    ListDocumentsQuery,
    UpdateDocumentBody,
    deep_merge,
    format_validation_error,
    merged_parser_config,
)
from gateway.responses import DocumentList, DocumentOut, PartialDelete, json_response
from gateway.routes._datasets import (
    TAGS,
    data_error,
    dataset_view,
    document_view,
    documents,
    find_dataset,
    next_name,
    owned_dataset,
    retrieval,
    settings_of,
)
from gateway.routes import document_metadata
from gateway.routes._views import ok

MAX_FILE_BYTES = 64 * 1024 * 1024
FILE_NAME_LEN_LIMIT = 255  # bytes, as RAGFlow
# RAGFlow's filename_type: a name matching none of these is "This type of file has not been supported yet!"
_SUPPORTED = re.compile(
    r".*\.(pdf|msg|eml|doc|docx|ppt|pptx|yml|xml|htm|json|jsonl|ldjson|csv|txt|ini|xls|xlsx|wps|rtf|hlp|pages|numbers|"
    r"key|md|mdx|py|js|java|c|cpp|h|php|go|ts|sh|cs|kt|html|sql|epub|wav|flac|ape|alac|wavpack|wv|mp3|aac|ogg|vorbis|"
    r"opus|jpg|jpeg|png|tif|gif|bmp|pcx|tga|exif|fpx|svg|psd|cdr|pcd|dxf|ufo|eps|ai|raw|wmf|webp|avif|apng|icon|ico|"
    r"mpg|mpeg|avi|rm|rmvb|mov|wmv|asf|dat|asx|wvx|mpe|mpa|mp4|mkv)$")
_RUN_CODES = {"0": "UNSTART", "1": "RUNNING", "2": "CANCEL", "3": "DONE", "4": "FAIL"}


class ParseDocumentsBody(_Body):
    document_ids: list[str] | None = None


async def _owned(request: web.Request, dataset_id: str) -> dict[str, Any]:
    """The dataset's view, or the document routes' wording of "not yours" (a trailing space, as RAGFlow)."""
    try:
        return await owned_dataset(request, dataset_id)
    except GatewayError:
        raise data_error(f"You don't own the dataset {dataset_id}. ") from None


# ---------------------------------------------------------------------------------------- upload
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
                                             multipart=("file",), response=list[DocumentOut], tags=TAGS))
async def upload_documents(request: web.Request) -> web.Response:
    tenant, rv, dataset_id = request[TENANT], retrieval(request), request.match_info["dataset_id"]
    if (found := await find_dataset(request, dataset_id)) is None:  # RAGFlow's upload wording (another tenant's
        raise data_error(f"Can't find the dataset with ID {dataset_id}!")  # dataset is one this key cannot find)
    dataset = dataset_view(found)
    files = await _read_files(request)
    taken = {d.name for d in await documents(request, dataset_id)}
    docs, errors = [], []
    for name, mime, content in files:
        if not _SUPPORTED.match(name.strip().lower()):
            errors.append(f"{name}: This type of file has not been supported yet!")
            continue
        while name in taken:
            name = next_name(name)
        taken.add(name)
        mime = "" if mime in ("application/octet-stream", "") else mime
        req = rr_pb.IngestDocumentRequest(tenant_id=tenant, dataset_id=dataset_id, name=name, mime_type=mime,
                                          content=content, store_only=True)
        try:
            docs.append(document_view(await rv.ingest(req), dataset))
        except GatewayError as err:
            if err.code != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            errors.append(f"{name}: {err.message}")
    if errors:  # RAGFlow: code 500 with the per-file errors, and the documents that did upload as data
        err = GatewayError("\n".join(errors), param="file", ragflow_code=500)
        if not docs:
            raise err
        return json_response({"code": 500, "message": err.message, "data": docs})
    return ok(docs)


# ---------------------------------------------------------------------------------------- list
def _run_filter(values: list[str]) -> set[str]:
    """RAGFlow's run filter: numbers or names; anything else is code 102 naming it."""
    wanted = {_RUN_CODES.get(v.strip(), v.strip().upper()) for v in values}
    invalid = sorted(v for v in values if _RUN_CODES.get(v.strip(), v.strip().upper()) not in _RUN_CODES.values())
    if invalid:
        raise data_error(f"Invalid filter run status conditions: {', '.join(invalid)}")
    return wanted


def _order(docs: list[rr_pb.Document], orderby: str, desc: bool) -> list[rr_pb.Document]:
    if orderby == "name":
        return sorted(docs, key=lambda d: (d.name, d.id), reverse=desc)
    field = "updated_at" if orderby == "update_time" else "created_at"
    return sorted(docs, key=lambda d: (getattr(d, field).ToNanoseconds(), d.id), reverse=desc)


@endpoint(Dialect.RAGFLOW, contract=Contract("List documents", query=ListDocumentsQuery, response=DocumentList, tags=TAGS))
async def list_documents(request: web.Request) -> web.Response:
    """RAGFlow's filters: id, ids, name, keywords (in the name), suffix, run, create_time_from/to (ms);
    ordered by create_time, update_time or name, newest (last) first unless `desc` is false."""
    dataset_id, q = request.match_info["dataset_id"], query(request)
    dataset = await _owned(request, dataset_id)
    if q.orderby not in ("create_time", "update_time", "name"):
        raise GatewayError(f"invalid orderby field: {q.orderby}", param="orderby")
    ids = [i for v in request.query.getall("ids", []) for i in v.split(",") if i]
    suffixes = {s.lower().lstrip(".") for v in request.query.getall("suffix", []) for s in v.split(",") if s}
    runs = _run_filter([r for v in request.query.getall("run", []) for r in v.split(",") if r.strip()])
    by_meta = await document_metadata.listed_ids(request, dataset_id)
    if by_meta is None and not (q.id or q.name or q.keywords or ids or suffixes or runs) and (q.orderby, q.desc) == ("create_time", True):
        # the service's own order and paging (newest first), without reading every document
        rv = retrieval(request)
        req = rr_pb.ListDocumentsRequest(tenant_id=request[TENANT], dataset_id=dataset_id, page=q.page,
                                         page_size=q.page_size)
        resp = await rv.call(rv.rpc.ListDocuments, req)
        return ok({"docs": _created_between(q, [document_view(d, dataset) for d in resp.documents]), "total": resp.total})
    every = await documents(request, dataset_id)
    if q.id and not any(d.id == q.id for d in every):
        raise data_error(f"you don't own the document {q.id}")
    if q.name and not any(d.name == q.name for d in every):
        raise data_error(f"you don't own the document {q.name}")
    if q.id and ids:
        raise data_error(f"Should not provide both 'id':{q.id} and 'ids'{ids}")
    wanted = {q.id} if q.id else set(ids) if ids else None
    keywords = (q.keywords or "").lower()
    docs = [d for d in every if (d.id in wanted if wanted is not None else by_meta is None or d.id in by_meta)
            and (not q.name or d.name == q.name)
            and (not keywords or keywords in d.name.lower())
            and (not suffixes or PurePath(d.name).suffix.lower().lstrip(".") in suffixes)
            and (not runs or document_view(d)["run"] in runs)]
    docs = _order(docs, q.orderby, q.desc)
    total = len(docs)
    page = [document_view(d, dataset) for d in docs[(q.page - 1) * q.page_size:q.page * q.page_size]]
    return ok({"docs": _created_between(q, page), "total": total})


def _created_between(q: ListDocumentsQuery, page: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RAGFlow filters by creation time (ms) after paging, so `total` counts the documents before it."""
    return [v for v in page if (not q.create_time_from or v["create_time"] >= q.create_time_from)
            and (not q.create_time_to or v["create_time"] <= q.create_time_to)]


# ---------------------------------------------------------------------------------------- update
def _check_update(req: UpdateDocumentBody, raw: dict[str, Any], doc: rr_pb.Document, others: list[rr_pb.Document]) -> None:
    """RAGFlow's validate_document_update_fields: counts and progress cannot change, nor a name's extension;
    names are unique in the dataset; some file types keep the parser detected for them."""
    if req.chunk_count is not None and req.chunk_count != doc.chunk_count:
        raise data_error("can't change `chunk_count`")
    if req.token_count is not None and req.token_count != 0:
        raise data_error("can't change `token_count`")
    if req.progress is not None and not math.isclose(req.progress, document_view(doc)["progress"]):
        raise data_error("can't change `progress`")
    if "name" in raw and raw["name"] != doc.name:
        name = raw["name"]
        if len(name.encode("utf-8")) > FILE_NAME_LEN_LIMIT:
            raise GatewayError(f"File name must be {FILE_NAME_LEN_LIMIT} bytes or less.", param="name")
        if PurePath(name.lower()).suffix != PurePath(doc.name.lower()).suffix:
            raise GatewayError("The extension of file can't be changed", param="name")
        if any(d.name == name for d in others):
            raise data_error("Duplicated document name in the same dataset.")
    if "chunk_method" in raw:
        method = raw["chunk_method"]
        if method is not None and len(method) == 0:
            raise data_error("`chunk_method` (empty string) is not valid")
        if ((doc.mime_type.startswith("image/") and method != "picture")
                or (doc.mime_type.startswith("audio/") and method != "audio")
                or (re.search(r"\.(ppt|pptx|pages)$", doc.name) and method != "presentation")
                or (re.search(r"\.(msg|eml)$", doc.name) and method != "email")):
            raise data_error("the automatically detected parser type cannot be changed")


@endpoint(Dialect.RAGFLOW, contract=Contract("Update a document (name, meta_fields, chunk_method, parser_config, enabled)",
                                             body=UpdateDocumentBody, response=DocumentOut, tags=TAGS))
async def update_document(request: web.Request) -> web.Response:
    """RAGFlow's update_document; `enabled: 0` keeps the document's chunks out of retrieval."""
    dataset_id, document_id = request.match_info["dataset_id"], request.match_info["document_id"]
    tenant, rv = request[TENANT], retrieval(request)
    raw = await read_json(request)
    if "name" in raw and raw["name"] is None:
        raise data_error("Field: <name> - Message: <Input should be a valid string> - Value: <None>")
    try:
        dataset = await owned_dataset(request, dataset_id)
    except GatewayError:
        raise data_error("you don't own the dataset") from None
    every = await documents(request, dataset_id)
    doc = next((d for d in every if d.id == document_id), None)
    if doc is None:
        raise data_error("the dataset doesn't own the document")
    try:
        req = UpdateDocumentBody.model_validate(raw)
    except ValidationError as exc:
        raise data_error(format_validation_error(exc)) from None
    _check_update(req, raw, doc, [d for d in every if d.id != doc.id])
    settings = settings_of(doc)
    if req.parser_config is not None:
        given = req.parser_config.model_dump(exclude_unset=True)
        given.update(given.pop("ext", None) or {})
        settings["parser_config"] = deep_merge(document_view(doc, dataset)["parser_config"], given)
    if req.chunk_method:
        settings["chunk_method"] = req.chunk_method
        if req.parser_config is None:
            settings["parser_config"] = merged_parser_config(req.chunk_method, None)
    update = rr_pb.UpdateDocumentRequest(
        tenant_id=tenant, dataset_id=dataset_id, document_id=document_id,
        name=raw["name"] if "name" in raw and raw["name"] != doc.name else None,
        metadata_json=json.dumps(req.meta_fields or {}, ensure_ascii=False) if "meta_fields" in raw else None,
        settings_json=json.dumps(settings, ensure_ascii=False) if settings != settings_of(doc) else None,
        disabled=not req.enabled if req.enabled is not None else None)
    try:
        updated = (await rv.call(rv.rpc.UpdateDocument, update)).document
    except GatewayError as err:  # a race with another update or a delete
        if err.code == grpc.StatusCode.ALREADY_EXISTS:
            raise data_error("Duplicated document name in the same dataset.") from None
        if err.code == grpc.StatusCode.NOT_FOUND:
            raise data_error("the dataset doesn't own the document") from None
        raise
    return ok(document_view(updated, dataset))


# ---------------------------------------------------------------------------------------- download
def _bare_error(message: str) -> web.Response:
    """RAGFlow's download errors are `{"code", "message"}` without `data`: exactly what the SDK's
    `Document.download` tells from a file."""
    return json_response({"code": 102, "message": message})


@endpoint(Dialect.RAGFLOW, contract=Contract("Download a document's uploaded file", binary=True, tags=TAGS))
async def download_document(request: web.Request) -> web.StreamResponse:
    dataset_id, document_id = request.match_info["dataset_id"], request.match_info["document_id"]
    rv = retrieval(request)
    if await find_dataset(request, dataset_id) is None:
        return _bare_error("document not found")
    req = rr_pb.GetDocumentFileRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_id=document_id)
    try:
        found = await rv.call(rv.rpc.GetDocumentFile, req)
    except GatewayError as err:
        if err.code == grpc.StatusCode.NOT_FOUND:
            return _bare_error("document not found")
        raise
    if not found.content:
        return _bare_error("This file is empty.")
    name = found.document.name
    return web.Response(body=found.content, content_type=found.document.mime_type or "application/octet-stream",
                        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}"})


# ---------------------------------------------------------------------------------------- delete, parse
@endpoint(Dialect.RAGFLOW, contract=Contract("Delete documents", body=DeleteDocumentsBody, response=dict[str, int], tags=TAGS))
async def delete_documents(request: web.Request) -> web.Response:
    req_body: DeleteDocumentsBody = await body(request)
    tenant, rv, dataset_id = request[TENANT], retrieval(request), request.match_info["dataset_id"]
    await _owned(request, dataset_id)
    ids = list(req_body.ids or [])
    if not req_body.delete_all and not ids:
        raise data_error(f"should either provide doc ids or set delete_all(true), dataset: {dataset_id}. ")
    if ids and req_body.delete_all:
        raise data_error(f"should not provide both doc ids and delete_all(true), dataset: {dataset_id}. ")
    known = [d.id for d in await documents(request, dataset_id)]
    if req_body.delete_all:
        ids = known
    invalid = [i for i in ids if i not in known]
    if invalid:
        raise data_error(f"These documents do not belong to dataset {dataset_id} or Document not found: {', '.join(invalid)}")
    for document_id in ids:
        req = rr_pb.DeleteDocumentRequest(tenant_id=tenant, dataset_id=dataset_id, document_id=document_id)
        await rv.call(rv.rpc.DeleteDocument, req)
    return ok({"deleted": len(ids)})


async def _read_any(request: web.Request) -> Any:
    """The body's JSON value, whatever it is (RAGFlow's parse routes tell a non-object apart)."""
    try:
        return json.loads(await request.read() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GatewayError("request body is not valid JSON", param="body") from None


def _not_an_object(raw: Any) -> GatewayError:
    """What RAGFlow answers for a body that is JSON but not an object (its route reads it with `.get`)."""
    return GatewayError(f"'{type(raw).__name__}' object has no attribute 'get'", param="body", ragflow_code=100)


async def _document_ids(request: web.Request) -> tuple[str, list[str], list[str]]:
    """The dataset, the body's `document_ids` (unique, all of the dataset) and RAGFlow's message per duplicate."""
    dataset_id = request.match_info["dataset_id"]
    await _owned(request, dataset_id)
    raw = await _read_any(request)
    if not isinstance(raw, dict):
        raise _not_an_object(raw)
    ids = raw.get("document_ids")
    if not isinstance(ids, list) or not ids:
        raise data_error("`document_ids` is required")
    ids = [str(i) for i in ids]
    known = {d.id for d in await documents(request, dataset_id)}
    unique = list(dict.fromkeys(ids))
    missing = [i for i in unique if i not in known]
    if missing:
        raise data_error(f"Documents not found: {missing}")
    return dataset_id, unique, [f"Duplicate document ids: {i}" for i in unique if ids.count(i) > 1]


def _counted(count: int, errors: list[str]) -> dict[str, Any]:
    return {"success_count": count, **({"errors": errors} if errors else {})}


@endpoint(Dialect.RAGFLOW, contract=Contract("Parse documents (in the background: each RUNNING, then DONE or FAIL)",
                                             body=ParseDocumentsBody, response=PartialDelete, tags=TAGS))
async def parse_documents(request: web.Request) -> web.Response:
    """RAGFlow's parse_documents: answers at once; a document parsed before is parsed again."""
    dataset_id, unique, duplicates = await _document_ids(request)
    rv = retrieval(request)
    req = rr_pb.ParseDocumentsRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_ids=unique)
    try:
        started = await rv.call(rv.rpc.ParseDocuments, req)
    except GatewayError as err:  # deleted since the check
        if err.code == grpc.StatusCode.NOT_FOUND:
            raise data_error(f"Documents not found: {unique}") from None
        raise
    return ok(_counted(len(started.documents), duplicates))


@endpoint(Dialect.RAGFLOW, contract=Contract("Stop parsing documents", body=ParseDocumentsBody, response=PartialDelete,
                                             tags=TAGS))
async def stop_parsing(request: web.Request) -> web.Response:
    """RAGFlow's stop_parse_documents: a parsing document ends CANCEL without chunks; one not parsing is
    named in `errors`."""
    dataset_id, unique, errors = await _document_ids(request)
    rv = retrieval(request)
    req = rr_pb.StopParsingRequest(tenant_id=request[TENANT], dataset_id=dataset_id, document_ids=unique)
    try:
        resp = await rv.call(rv.rpc.StopParsing, req)
    except GatewayError as err:
        if err.code == grpc.StatusCode.NOT_FOUND:
            raise data_error(f"Documents not found: {unique}") from None
        raise
    errors += ["Can't stop parsing document that has not started or already completed"] * len(resp.not_running)
    return ok(_counted(len(resp.stopped), errors))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/v1/datasets/{dataset_id}/documents", upload_documents)
    r.add_get("/api/v1/datasets/{dataset_id}/documents", list_documents)
    r.add_delete("/api/v1/datasets/{dataset_id}/documents", delete_documents)
    r.add_get("/api/v1/datasets/{dataset_id}/documents/{document_id}", download_document)
    r.add_put("/api/v1/datasets/{dataset_id}/documents/{document_id}", update_document)  # ragflow-sdk 0.22
    r.add_patch("/api/v1/datasets/{dataset_id}/documents/{document_id}", update_document)
    r.add_post("/api/v1/datasets/{dataset_id}/documents/parse", parse_documents)
    r.add_post("/api/v1/datasets/{dataset_id}/documents/stop", stop_parsing)
    r.add_post("/api/v1/datasets/{dataset_id}/chunks", parse_documents)  # the SDKs' form
    r.add_delete("/api/v1/datasets/{dataset_id}/chunks", stop_parsing)
