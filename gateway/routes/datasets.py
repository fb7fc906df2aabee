"""RAGFlow's dataset endpoints, backed by the retrieval service (documents: documents.py, chunks: chunks.py,
retrieval: retrieve.py):

    POST/GET/DELETE /api/v1/datasets
    GET/PUT         /api/v1/datasets/{dataset_id}
    GET/PUT         /api/v1/datasets/{dataset_id}/metadata/config     (auto-metadata fields, in parser_config)

and, registered from here: document metadata (document_metadata.py), ingestions and the embedding check
(ingestions.py).

Validation, defaults, codes and messages follow RAGFlow's restful_apis/dataset_api.py and its
validation_utils: bodies are strict (gateway/ragflow_models.py), a duplicate name gets "(1)" appended on
create and is refused on update. RAGFlow's own settings (avatar, permission, chunk_method, parser_config,
language) are kept with the dataset in the retrieval service (`settings_json`); its pagerank is the
dataset's own field there, since search adds it to every score of the dataset's chunks.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from aiohttp import web
from pydantic import ValidationError
from pydantic_core import PydanticCustomError
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.llm_models import MODELS
from gateway.ragflow_models import (
    AutoMetadataConfig,
    CreateDatasetBody,
    DeleteDatasetsBody,
    ListDatasetsQuery,
    UpdateDatasetBody,
    format_validation_error,
    merged_parser_config,
    updated_parser_config,
    uuid_hex,
)
from gateway.responses import DatasetOut, DatasetsDeleted
from gateway.routes._datasets import (
    TAGS,
    data_error,
    dataset_view,
    documents,
    find_dataset,
    next_name,
    owned_dataset,
    owned_datasets,
    retrieval,
)
from gateway.routes import document_metadata, ingestions
from gateway.routes._views import ok

_ORDER = {"create_time": rr_pb.DATASET_ORDER_CREATE_TIME, "update_time": rr_pb.DATASET_ORDER_UPDATE_TIME}
_SETTINGS = ("avatar", "permission", "chunk_method", "parser_config", "language")  # kept in settings_json


async def embedding_model_for(request: web.Request, given: str | None) -> str:
    """The embedding model a dataset gets: the one given when the llm_gateway serves it (else RAGFlow's
    message, code 102), the default embedding model when none is given."""
    listing = await request.app[MODELS].listing()
    if not given:
        return listing.default("embedding")
    if (problem := listing.embedding_problem(given)) is not None:
        raise data_error(problem)
    return given


def _free_name(name: str, taken: set[str]) -> str:
    """RAGFlow's duplicate_name, case-insensitive as its database compares names: `a` -> `a(1)` -> `a(2)`."""
    while name.lower() in taken:
        name = next_name(name)
    return name


@endpoint(Dialect.RAGFLOW, contract=Contract("Create a dataset", body=CreateDatasetBody, response=DatasetOut, tags=TAGS))
async def create_dataset(request: web.Request) -> web.Response:
    req_body: CreateDatasetBody = await body(request)
    rv, given = retrieval(request), req_body.parser_config_given()
    chunk_method = req_body.chunk_method or "naive"
    model = await embedding_model_for(request, req_body.embedding_model)
    parser_config = merged_parser_config(chunk_method, req_body.parser_config_full())
    parser_config["llm_id"] = (await request.app[MODELS].listing()).default("chat")
    settings = {"avatar": req_body.avatar, "permission": req_body.permission, "chunk_method": chunk_method,
                "parser_config": parser_config}
    size = max(int((given or {}).get("chunk_token_num") or 0), 16) if given and "chunk_token_num" in given else 0
    taken = {d.name.lower() for d in await owned_datasets(request)}
    name = _free_name(req_body.name, taken)
    for _ in range(1000):  # a name taken since the listing: the next one
        req = rr_pb.CreateDatasetRequest(tenant_id=request[TENANT], name=name, description=req_body.description or "",
                                         embedding_model=model, chunk_size=size,
                                         settings_json=json.dumps(settings, ensure_ascii=False))
        try:
            created = await rv.call(rv.rpc.CreateDataset, req)
        except GatewayError as err:
            if err.code != grpc.StatusCode.ALREADY_EXISTS:
                raise
            taken.add(name.lower())
            name = _free_name(name, taken)
            continue
        return ok(dataset_view(created.dataset))
    raise data_error(f"Dataset name '{req_body.name}' already exists")


def _sort_key(orderby: str):
    field = "updated_at" if orderby == "update_time" else "created_at"
    return lambda d: (getattr(d, field).ToNanoseconds() or d.created_at.ToNanoseconds(), d.id)


@endpoint(Dialect.RAGFLOW, contract=Contract("List datasets", query=ListDatasetsQuery, response=list[DatasetOut], tags=TAGS))
async def list_datasets(request: web.Request) -> web.Response:
    """`data` is the list; the total is top-level `total_datasets` (RAGFlow) and `total`. Ordered by `orderby`
    (create_time, update_time), newest first unless `desc` is false."""
    tenant, rv, q = request[TENANT], retrieval(request), query(request)
    if len(ids := request.query.getall("ids", [])) > 1:  # every repeated `ids`, not only the last
        try:
            q = ListDatasetsQuery.model_validate({**dict(request.query), "ids": ids})
        except ValidationError as exc:
            raise GatewayError(format_validation_error(exc), param="ids") from None
    if q.id and q.ids:
        raise data_error(f"Should not provide both 'id':{q.id} and 'ids'{q.ids}")
    if q.id or q.name or q.ids is not None:
        every = await owned_datasets(request)
        if q.id and not any(d.id == q.id for d in every):
            raise data_error(f"User '{tenant}' lacks permission for dataset '{q.id}'")
        if q.name and not any(d.name == q.name for d in every):
            raise data_error(f"User '{tenant}' lacks permission for dataset '{q.name}'")
        items = [d for d in every if (not q.id or d.id == q.id) and (not q.name or d.name == q.name)
                 and (q.ids is None or d.id in q.ids)]
        items.sort(key=_sort_key(q.orderby), reverse=q.desc)
        views = [dataset_view(d) for d in items[(q.page - 1) * q.page_size:q.page * q.page_size]]
        return ok(views, total=len(items), total_datasets=len(items))
    req = rr_pb.ListDatasetsRequest(tenant_id=tenant, page=q.page, page_size=q.page_size, order_by=_ORDER[q.orderby],
                                    ascending=not q.desc)
    resp = await rv.call(rv.rpc.ListDatasets, req)
    return ok([dataset_view(d) for d in resp.datasets], total=resp.total, total_datasets=resp.total)


@endpoint(Dialect.RAGFLOW, contract=Contract("Get a dataset", response=DatasetOut, tags=TAGS))
async def get_dataset(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    found = await find_dataset(request, dataset_id)
    if found is None:
        raise data_error(f"User '{request[TENANT]}' lacks permission for dataset '{dataset_id}'")
    size = sum(doc.size for doc in await documents(request, dataset_id))
    return ok({**dataset_view(found), "size": size, "connectors": []})


async def _update_body(request: web.Request) -> tuple[str, dict[str, Any]]:
    """The path's dataset id and the fields the body set, checked as RAGFlow's UpdateDatasetReq (the id is
    one of its fields, so its error comes after the body's)."""
    raw_id = request.match_info["dataset_id"]
    try:
        dataset_id, id_error = uuid_hex(raw_id), ""
    except PydanticCustomError as exc:
        dataset_id, id_error = raw_id, f"Field: <dataset_id> - Message: <{exc.message()}> - Value: <{raw_id[:128]}>"
    try:
        req_body: UpdateDatasetBody = await body(request)
    except GatewayError as err:
        if id_error and err.message.startswith("Field: "):
            err.message += "\n" + id_error
        raise
    if id_error:
        raise GatewayError(id_error, param="dataset_id")
    return dataset_id, req_body.given()


@endpoint(Dialect.RAGFLOW, contract=Contract("Update a dataset (only the fields given)", body=UpdateDatasetBody,
                                             response=DatasetOut, tags=TAGS))
async def update_dataset(request: web.Request) -> web.Response:
    """RAGFlow's update_dataset; the embedding model may change only while the dataset holds no chunks
    (RAGFlow's rule until its re-embedding API)."""
    dataset_id, given = await _update_body(request)
    tenant, rv = request[TENANT], retrieval(request)
    if not given:
        raise data_error("no properties were modified")
    current = await find_dataset(request, dataset_id)
    if current is None:
        raise data_error(f"User '{tenant}' lacks permission for dataset '{dataset_id}'")
    view = dataset_view(current)
    settings = {k: view[k] for k in _SETTINGS}
    settings.update({k: given[k] for k in ("avatar", "permission", "language") if k in given})
    if given.get("parser_config"):
        settings["parser_config"] = updated_parser_config(view["parser_config"], given["parser_config"])
    if (chunk_method := given.get("chunk_method")) and chunk_method != view["chunk_method"]:
        settings["chunk_method"] = chunk_method
        if not given.get("parser_config"):
            settings["parser_config"] = merged_parser_config(chunk_method, None)
    name = given.get("name")
    if name is not None and name.lower() != current.name.lower():
        if any(d.name.lower() == name.lower() for d in await owned_datasets(request)):
            raise data_error(f"Dataset name '{name}' already exists")
    model = None
    if "embedding_model" in given:  # RAGFlow allows a new model while the dataset holds chunks
        model = await embedding_model_for(request, given["embedding_model"] or current.embedding_model)
    req = rr_pb.UpdateDatasetRequest(
        tenant_id=tenant, dataset_id=dataset_id, name=name, embedding_model=model, pagerank=given.get("pagerank"),
        description=(given["description"] or "") if "description" in given else None,
        settings_json=json.dumps(settings, ensure_ascii=False))
    try:
        updated = (await rv.call(rv.rpc.UpdateDataset, req)).dataset
    except GatewayError as err:  # a race with another update or an upload
        if err.code == grpc.StatusCode.ALREADY_EXISTS:
            raise data_error(f"Dataset name '{name}' already exists") from None
        if err.code == grpc.StatusCode.NOT_FOUND:
            raise data_error(f"User '{tenant}' lacks permission for dataset '{dataset_id}'") from None
        if err.code == grpc.StatusCode.FAILED_PRECONDITION:
            raise data_error(f"embedding_model must remain {current.embedding_model}: {err.message}") from None
        raise
    return ok({**dataset_view(updated), "connectors": []})


async def _settings(request: web.Request, dataset_id: str) -> dict[str, Any]:
    """The dataset's RAGFlow settings as its view shows them; RAGFlow's 102 for a dataset not the tenant's."""
    found = await find_dataset(request, dataset_id)
    if found is None:
        raise data_error(f"User '{request[TENANT]}' lacks permission for dataset '{dataset_id}'")
    view = dataset_view(found)
    return {k: view[k] for k in _SETTINGS}


@endpoint(Dialect.RAGFLOW, contract=Contract("Get a dataset's auto-metadata fields", response=AutoMetadataConfig, tags=TAGS))
async def get_auto_metadata(request: web.Request) -> web.Response:
    config = (await _settings(request, request.match_info["dataset_id"]))["parser_config"]
    return ok({"metadata": config.get("metadata") or [], "built_in_metadata": config.get("built_in_metadata") or []})


@endpoint(Dialect.RAGFLOW, contract=Contract("Set a dataset's auto-metadata fields", body=AutoMetadataConfig,
                                             response=AutoMetadataConfig, tags=TAGS))
async def update_auto_metadata(request: web.Request) -> web.Response:
    cfg: AutoMetadataConfig = await body(request)
    dataset_id = request.match_info["dataset_id"]
    settings = await _settings(request, dataset_id)
    given = cfg.model_dump()
    settings["parser_config"] = {**settings["parser_config"], **given}
    rv = retrieval(request)
    req = rr_pb.UpdateDatasetRequest(tenant_id=request[TENANT], dataset_id=dataset_id,
                                     settings_json=json.dumps(settings, ensure_ascii=False))
    await rv.call(rv.rpc.UpdateDataset, req)
    return ok(given)


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete datasets", body=DeleteDatasetsBody, response=DatasetsDeleted, tags=TAGS))
async def delete_datasets(request: web.Request) -> web.Response:
    """`ids` deletes those; no ids deletes nothing unless `delete_all` is true (RAGFlow's code; its docs say
    `null` means all, its code and tests do not)."""
    req_body: DeleteDatasetsBody = await body(request)
    tenant, rv = request[TENANT], retrieval(request)
    owned = {d.id for d in await owned_datasets(request)}
    ids = list(req_body.ids or [])
    if not ids:
        if not req_body.delete_all:
            return ok({"success_count": 0})
        ids = sorted(owned)
    missing = [i for i in ids if i not in owned]
    if missing:
        raise data_error(f"User '{tenant}' lacks permission for datasets: '{', '.join(missing)}'")
    for dataset_id in ids:
        await rv.call(rv.rpc.DeleteDataset, rr_pb.DeleteDatasetRequest(tenant_id=tenant, dataset_id=dataset_id))
    return ok({"success_count": len(ids)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete a dataset's knowledge graph, RAPTOR or mind-map index "
                                             "(Trellis builds none)", response=None, tags=TAGS))
async def delete_index(request: web.Request) -> web.Response:
    await owned_dataset(request, request.match_info["dataset_id"])
    raise data_error("Trellis builds no knowledge graph, RAPTOR or mind-map index: there is none to delete")


def add_index_route(app: web.Application) -> None:
    """RAGFlow's `DELETE /datasets/{id}/{index_type}`, after every other route: its pattern takes any second
    segment, so the dataset's own DELETE routes must come first."""
    app.router.add_delete("/api/v1/datasets/{dataset_id}/{index_type}", delete_index)


def add_routes(app: web.Application) -> None:
    document_metadata.add_routes(app)  # first: /datasets/metadata/flattened before /datasets/{dataset_id}
    ingestions.add_routes(app)
    r = app.router
    r.add_post("/api/v1/datasets", create_dataset)
    r.add_get("/api/v1/datasets", list_datasets)
    r.add_delete("/api/v1/datasets", delete_datasets)
    r.add_get("/api/v1/datasets/{dataset_id}", get_dataset)
    r.add_put("/api/v1/datasets/{dataset_id}", update_dataset)
    r.add_get("/api/v1/datasets/{dataset_id}/metadata/config", get_auto_metadata)
    r.add_put("/api/v1/datasets/{dataset_id}/metadata/config", update_auto_metadata)
