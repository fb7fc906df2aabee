"""RAGFlow's retrieval endpoint, backed by the retrieval service's hybrid search:

    POST /api/v1/retrieval

Validation, defaults, codes and messages follow RAGFlow's chunk_api.py retrieval route. Chunks a client switched off
(`available: false`) and the chunks of disabled documents are never returned; a chunk's important
keywords count as found terms (services/retrieval/scoring.py).
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.protocol import _Body, read_json
from gateway.ragflow_models import INT32_MAX, MAX_PAGE_SIZE
from gateway.responses import RetrievalOut
from gateway.routes._datasets import TAGS, chunk_view, data_error, documents, owned_datasets, retrieval
from gateway.routes._views import ok


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


def _page(value: Any, default: int) -> int:
    """RAGFlow's validate_rest_api_page(_size): a value int() refuses, or one below 1, is the default."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number >= 1 else default


def _converted(convert: Any, value: Any) -> Any:
    """`convert(value)` as RAGFlow's route does it unguarded: its exception is RAGFlow's answer (code 100, the
    exception's repr, what its server_error_response gives)."""
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise GatewayError(repr(exc), ragflow_code=100) from None


def _highlight(raw: dict[str, Any]) -> bool:
    value = raw.get("highlight")
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise data_error("`highlight` should be a boolean")


def highlighted(content: str, question: str) -> str:
    """The chunk's text with the question's words in <em>, as RAGFlow's highlight marks them; the text as it is
    when none occurs (RAGFlow's fallback)."""
    words = sorted({w for w in re.findall(r"\w+", question) if len(w) > 1}, key=len, reverse=True)
    if not words:
        return content
    return re.sub(r"\b(" + "|".join(map(re.escape, words)) + r")\b", r"<em>\1</em>", content, flags=re.IGNORECASE)


@endpoint(Dialect.RAGFLOW, contract=Contract("Retrieve chunks from datasets", body=RetrievalBody, response=RetrievalOut,
                                             tags=TAGS))
async def retrieve(request: web.Request) -> web.Response:
    """RAGFlow's retrieval_test, check for check and in its order. Unlike RAGFlow, a vector_similarity_weight
    outside 0..1 is taken as the nearer bound (RAGFlow weighs with it as given, the keyword side negative)."""
    raw = await read_json(request)
    if not raw.get("dataset_ids"):
        raise data_error("`dataset_ids` is required.")
    if not isinstance(raw["dataset_ids"], list):
        raise data_error("`dataset_ids` should be a list")
    dataset_ids = [str(i) for i in raw["dataset_ids"]]
    owned = {d.id for d in await owned_datasets(request)}
    for dataset_id in dataset_ids:
        if dataset_id not in owned:
            raise data_error(f"You don't own the dataset {dataset_id}.")
    if "question" not in raw:
        raise data_error("`question` is required.")
    page, size = _page(raw.get("page", 1), 1), _page(raw.get("page_size", 30), 30)
    if size > MAX_PAGE_SIZE:
        raise GatewayError(repr(ValueError(f"page_size must be less than or equal to {MAX_PAGE_SIZE}")), ragflow_code=100)
    question = raw["question"].strip() if isinstance(raw["question"], str) else raw["question"]
    if not question:
        return ok({"total": 0, "chunks": [], "doc_aggs": {}})
    doc_ids = raw.get("document_ids", [])
    if not isinstance(doc_ids, list):
        raise data_error("`documents` should be a list")
    if doc_ids:
        listed = set()
        for dataset_id in dataset_ids:
            listed |= {d.id for d in await documents(request, dataset_id)}
        for doc_id in doc_ids:
            if doc_id not in listed:
                raise data_error(f"The datasets don't own the document {doc_id}")
    threshold = _converted(float, raw.get("similarity_threshold", 0.2))
    weight = _converted(float, raw.get("vector_similarity_weight", 0.3))
    top_k = _converted(int, raw.get("top_k", 1024))
    if top_k <= 0:
        raise data_error("`top_k` must be greater than 0")
    highlight = _highlight(raw)
    meta = raw.get("metadata_condition") if not doc_ids and isinstance(raw.get("metadata_condition"), dict) else {}
    conditions = [rr_pb.MetadataCondition(key=str(c.get("name", c.get("key"))),
                                          operator=str(c.get("comparison_operator", c.get("op", "="))),
                                          value=str(c.get("value", "")))
                  for c in meta.get("conditions") or [] if isinstance(c, dict) and c.get("name", c.get("key"))]
    page = min(page, INT32_MAX // size)  # page * size goes in an int32
    req = rr_pb.SearchRequest(
        tenant_id=request[TENANT], query=str(question), dataset_ids=dataset_ids, document_ids=[str(i) for i in doc_ids],
        top_n=page * size, top_k=min(top_k, INT32_MAX), similarity_threshold=threshold,
        keywords_similarity_weight=1.0 - min(max(weight, 0.0), 1.0), rerank_model=str(raw.get("rerank_id") or ""),
        metadata_filter=conditions, metadata_logic=str(meta.get("logic") or "and"))
    rv = retrieval(request)
    resp = await rv.call(rv.rpc.Search, req)
    chunks = list(resp.chunks)[(page - 1) * size:]
    views = [chunk_view(c) for c in chunks]
    for view in views:
        view.pop("highlight")
        if highlight:
            view["highlight"] = highlighted(view["content"], str(question))
    return ok({"chunks": views, "doc_aggs": _aggs(chunks), "total": resp.total})


def _aggs(chunks: list[rr_pb.Chunk]) -> list[dict[str, Any]]:
    aggs: dict[str, dict[str, Any]] = {}
    for c in chunks:
        agg = aggs.setdefault(c.document_id, {"doc_name": c.document_name, "doc_id": c.document_id, "count": 0})
        agg["count"] += 1
    return sorted(aggs.values(), key=lambda a: -a["count"])


async def _dataset_search(request: web.Request, dataset_ids: list[str]) -> web.Response:
    """RAGFlow's dataset search (dataset_api.py): `question` is required (101); `size` or `page_size`,
    `doc_ids` or `document_ids`, the retrieval route's knobs; answered as /retrieval answers."""
    raw = await read_json(request)
    if not str(raw.get("question") or "").strip():
        raise GatewayError("`question` is required.", param="question")
    owned = {d.id for d in await owned_datasets(request)}
    for dataset_id in dataset_ids:
        if dataset_id not in owned:
            raise data_error(f"You don't own the dataset {dataset_id}.")
    doc_ids = raw.get("doc_ids", raw.get("document_ids")) or []
    if not isinstance(doc_ids, list):
        raise GatewayError("`doc_ids` should be a list", param="doc_ids")
    size = raw.get("size", raw.get("page_size", 30))
    page, top_k = raw.get("page", 1), raw.get("top_k", 1024)
    threshold, weight = raw.get("similarity_threshold", 0.2), raw.get("vector_similarity_weight", 0.3)
    for name, value in (("page", page), ("size", size), ("top_k", top_k)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise GatewayError(f"`{name}` must be an integer", param=name)
    for name, value in (("similarity_threshold", threshold), ("vector_similarity_weight", weight)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise GatewayError(f"`{name}` must be a number between 0 and 1", param=name)
    size = size if 1 <= size <= MAX_PAGE_SIZE else 30
    page = min(page, INT32_MAX // size) if page >= 1 else 1
    req = rr_pb.SearchRequest(
        tenant_id=request[TENANT], query=str(raw["question"]).strip(), dataset_ids=dataset_ids,
        document_ids=[str(i) for i in doc_ids], top_n=page * size, top_k=min(max(top_k, 1), INT32_MAX),
        similarity_threshold=float(threshold), keywords_similarity_weight=1.0 - float(weight))
    rv = retrieval(request)
    resp = await rv.call(rv.rpc.Search, req)
    chunks = list(resp.chunks)[(page - 1) * size:]
    return ok({"chunks": [chunk_view(c) for c in chunks], "doc_aggs": _aggs(chunks), "total": resp.total})


@endpoint(Dialect.RAGFLOW, contract=Contract("Search one dataset", response=RetrievalOut, tags=TAGS))
async def search_dataset(request: web.Request) -> web.Response:
    return await _dataset_search(request, [request.match_info["dataset_id"]])


@endpoint(Dialect.RAGFLOW, contract=Contract("Search datasets", response=RetrievalOut, tags=TAGS))
async def search_datasets(request: web.Request) -> web.Response:
    raw = await read_json(request)
    ids = raw.get("dataset_ids")
    if not isinstance(ids, list) or not ids:
        raise GatewayError("`dataset_ids` is required.", param="dataset_ids")
    return await _dataset_search(request, [str(i) for i in ids])


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/retrieval", retrieve)
    app.router.add_post("/api/v1/datasets/search", search_datasets)
    app.router.add_post("/api/v1/datasets/{dataset_id}/search", search_dataset)
