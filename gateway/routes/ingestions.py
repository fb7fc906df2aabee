"""RAGFlow's ingestion routes and its embedding-model check, for what Trellis keeps:

    GET  /api/v1/datasets/{dataset_id}/ingestions/summary   (documents, chunks and each parse status's count)
    GET  /api/v1/datasets/{dataset_id}/ingestions[/{log_id}]
    POST /api/v1/datasets/{dataset_id}/embedding/check

Codes and messages follow RAGFlow's dataset_api.py and dataset_api_service.py. Two answers differ by what
Trellis does not keep: RAGFlow's ingestion logs are its pipeline runs' records (knowledge graph, RAPTOR,
ingestion pipelines); Trellis parses documents without them, so the list is empty and a log is never found.
And RAGFlow's embedding check re-embeds stored chunks with the new model and compares vectors; the retrieval
service hands out no stored vectors, so a dataset with chunks gets a 102 saying so (one without chunks gets
RAGFlow's own "No embedded chunks are available to compare.").
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel

from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.llm_models import MODELS
from gateway.protocol import read_json
from gateway.ragflow_models import MAX_PAGE_SIZE
from gateway.routes._datasets import TAGS, data_error, document_view, documents, find_dataset
from gateway.routes._views import ok

_STATUS_KEYS = {"UNSTART": "unstart_count", "RUNNING": "running_count", "CANCEL": "cancel_count",
                "DONE": "done_count", "FAIL": "fail_count"}


class EmbeddingCheckBody(BaseModel):
    embd_id: str | None = None  # the embedding model to compare with the dataset's
    check_num: int = 5  # how many chunks RAGFlow samples


async def _accessible(request: web.Request, dataset_id: str, message: str) -> Any:
    found = await find_dataset(request, dataset_id)
    if found is None:
        raise data_error(message)
    return found


@endpoint(Dialect.RAGFLOW, contract=Contract("A dataset's ingestion summary", response=dict, tags=TAGS))
async def ingestion_summary(request: web.Request) -> web.Response:
    """RAGFlow's get_ingestion_summary: doc_num, chunk_num, token_num and the documents per parse status."""
    dataset_id = request.match_info["dataset_id"]
    found = await _accessible(request, dataset_id, f"User '{request[TENANT]}' lacks permission for dataset '{dataset_id}'")
    status = dict.fromkeys(_STATUS_KEYS.values(), 0)
    for doc in await documents(request, dataset_id):
        status[_STATUS_KEYS[document_view(doc)["run"]]] += 1
    return ok({"doc_num": found.document_count, "chunk_num": found.chunk_count, "token_num": 0, "status": status})


def _page(value: str | None, default: int) -> int:
    """RAGFlow's validate_rest_api_page(_size): anything not a positive integer is the default."""
    try:
        number = int(value) if value is not None else default
    except ValueError:
        return default
    return number if number >= 1 else default


@endpoint(Dialect.RAGFLOW, contract=Contract("A dataset's ingestion logs (Trellis keeps none)", response=dict, tags=TAGS))
async def ingestion_logs(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    if _page(request.query.get("page_size"), 30) > MAX_PAGE_SIZE:
        raise GatewayError(f"page_size must be less than or equal to {MAX_PAGE_SIZE}", param="page_size")
    await _accessible(request, dataset_id, "no authorization")
    if request.query.get("log_type", "dataset") not in ("dataset", "file"):
        raise data_error('Invalid "log_type", expected "dataset" or "file"')
    return ok({"total": 0, "logs": []})


@endpoint(Dialect.RAGFLOW, contract=Contract("One ingestion log (Trellis keeps none)", response=dict, tags=TAGS))
async def ingestion_log(request: web.Request) -> web.Response:
    await _accessible(request, request.match_info["dataset_id"], "no authorization")
    raise data_error("Log not found")


@endpoint(Dialect.RAGFLOW, contract=Contract("Check an embedding model against a dataset's stored vectors",
                                             body=EmbeddingCheckBody, response=dict, tags=TAGS))
async def check_embedding(request: web.Request) -> web.Response:
    dataset_id = request.match_info["dataset_id"]
    raw = await read_json(request)
    if not raw.get("embd_id"):
        raise data_error("`embd_id` is required.")
    found = await _accessible(request, dataset_id, "no authorization")
    embd_id = str(raw["embd_id"])
    if (problem := (await request.app[MODELS].listing()).embedding_problem(embd_id)) is not None:
        raise data_error(problem)
    if not found.chunk_count:
        raise data_error("No embedded chunks are available to compare.")
    raise data_error("Trellis cannot compare embedding models: the retrieval service hands out no stored vectors "
                     f"to re-embed with {embd_id}")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/datasets/{dataset_id}/ingestions/summary", ingestion_summary)  # before .../{log_id}
    r.add_get("/api/v1/datasets/{dataset_id}/ingestions", ingestion_logs)
    r.add_get("/api/v1/datasets/{dataset_id}/ingestions/{log_id}", ingestion_log)
    r.add_post("/api/v1/datasets/{dataset_id}/embedding/check", check_embedding)
