"""Retrieval: search the tenant's datasets and hand the chunks on, as RAGFlow's `agent/tools/retrieval.py`.

Params (RAGFlow defaults): `kb_ids` (or `dataset_ids`): dataset ids, or references containing "@" whose
value is a dataset name or id (or a list of them); `query` (a bare ref, a template with {refs}, or absent:
`sys.query`); `top_n` 8, `top_k` 1024, `similarity_threshold` 0.2, `keywords_similarity_weight` 0.5,
`rerank_id` (a rerank model, "" for none), `empty_response` (the text when nothing is found),
`meta_data_filter` ({"method": "manual", "manual": [{"key", "op", "value"}], "logic"}; "auto" needs an
LLM to write the filter and is not supported: it is ignored with a warning). `use_kg`, `toc_enhance`,
`cross_languages`, `memory_ids`, `retrieval_from` are accepted and have no effect here.

Outputs: `formalized_content` (RAGFlow's kb_prompt: "ID: n / Title / metadata / Content" blocks whose n is
the citation id), `json` (the chunks). The chunks also go into the run's references (`state.retrieval[-1]`
as {"chunks": {id: chunk}, "doc_aggs": {name: {doc_name, doc_id, count}}}), which Message sends with
`message_end`. As an Agent tool it is `search_my_dateset` (sic) with one argument, `query`: see `TOOL`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Annotated, Any, Awaitable, TypeVar

from services.clients.retrieval import Chunk, MetadataCondition, RetrievalClient
from services.common.errors import Cancelled, DeadlineExceeded, InvalidArgument, NotFound, ServiceError, Unavailable
from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params, validator
from services.orchestrator.engine.tracing import traced_retrieval

log = logging.getLogger(__name__)

TOOL_NAME = "search_my_dateset"  # RAGFlow's spelling: Agents and prompts refer to it by this name
TOOL_DESCRIPTION = "This tool can be utilized for relevant content searching in the datasets."
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": (
        "The keywords to search the dataset. The keywords should be the most important words/terms"
        "(includes synonyms) from the original request.")}},
    "required": ["query"],
}
DEFAULTS = {"top_n": 8, "top_k": 1024, "similarity_threshold": 0.2, "keywords_similarity_weight": 0.5}
_USER_PREFIX = re.compile(r"^user[:：\s]*", re.IGNORECASE)
T = TypeVar("T")


def hash_str2int(text: str, mod: int = 500) -> int:
    """RAGFlow's citation id of a chunk (`common/misc_utils.py`), so [ID:n] markers match its references."""
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % mod


def _number(raw: Any, kind: type, default: Any, maximum: float | None = None) -> Any:
    """`raw` as a `kind` (an int or a float; numeric text too), `default` when empty; ValueError otherwise."""
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number, got {raw!r}") from None
    if value < 0 or (maximum is not None and value > maximum):
        raise ValueError(f"is out of range: {raw!r}")
    return value


def _setting(kind: type, maximum: float | None = None) -> Any:
    def check(raw: Any) -> Any:
        _number(raw, kind, None, maximum)
        return raw
    return Annotated[Any, validator(check)]


def _datasets(value: Any) -> Any:
    if value is not None and not isinstance(value, (list, str)):
        raise ValueError("must be a list of dataset ids or references")
    return value


class RetrievalParams(Params):
    kb_ids: Annotated[Any, validator(_datasets)] = None  # ids, or references to names or ids
    dataset_ids: Annotated[Any, validator(_datasets)] = None  # the same, RAGFlow's other name
    query: Any = None  # a bare ref, a template with {refs}; absent: sys.query
    top_n: _setting(int) = DEFAULTS["top_n"]  # type: ignore[valid-type]
    top_k: _setting(int) = DEFAULTS["top_k"]  # type: ignore[valid-type]
    similarity_threshold: _setting(float) = DEFAULTS["similarity_threshold"]  # type: ignore[valid-type]
    keywords_similarity_weight: _setting(float, 1) = DEFAULTS["keywords_similarity_weight"]  # type: ignore[valid-type]
    rerank_id: Any = None
    empty_response: Any = None
    meta_data_filter: Any = None  # {"method": "manual", "manual": [{key, op, value}], "logic"}
    description: Any = None  # as an Agent tool: what the model reads about it


def _draw(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False) if value is not None else ""
    return f"\n├── {key}: " + re.sub(r"\n+", " ", text) if text else ""


def chunk_view(c: Chunk) -> dict[str, Any]:
    """A chunk as RAGFlow's `chunks_format` writes it into references and the `json` output."""
    view = {"id": c.id, "content": c.content, "document_id": c.document_id, "document_name": c.document_name,
            "dataset_id": c.dataset_id, "image_id": "", "positions": list(c.positions), "url": None,
            "similarity": c.similarity, "vector_similarity": c.vector_similarity,
            "term_similarity": c.term_similarity, "doc_type": ""}
    if c.metadata:
        view["document_metadata"] = c.metadata
    return view


def formalize(chunks: list[dict[str, Any]]) -> str:
    """RAGFlow's `kb_prompt(..., hash_id=True)` joined by newlines: one block per chunk, citable by its ID."""
    blocks = []
    for ck in chunks:
        text = f"\nID: {hash_str2int(ck['id'])}" + _draw("Title", ck["document_name"])
        for key, value in (ck.get("document_metadata") or {}).items():
            text += _draw(key, value)
        blocks.append(text + "\n└── Content:\n" + ck["content"])
    return "\n".join(blocks)


def add_reference(ctx: NodeContext, chunks: list[dict[str, Any]]) -> None:
    """Record the chunks in the run's references (RAGFlow `Canvas.add_reference`), for message_end."""
    state = ctx.env.state
    if state is None:
        return
    if not isinstance(state.retrieval, list) or not state.retrieval or not isinstance(state.retrieval[-1], dict):
        state.retrieval = [*(state.retrieval if isinstance(state.retrieval, list) else []), {"chunks": {}, "doc_aggs": {}}]
    ref = state.retrieval[-1]
    ref_chunks = ref.setdefault("chunks", {})
    doc_aggs = ref.setdefault("doc_aggs", {})
    for ck in chunks:
        ref_chunks.setdefault(str(hash_str2int(ck["id"])), ck)
        agg = doc_aggs.setdefault(ck["document_name"], {"doc_name": ck["document_name"], "doc_id": ck["document_id"], "count": 0})
        agg["count"] += 1


@register
class Retrieval(Component):
    component_name = "Retrieval"
    exception_output = "formalized_content"
    params_model = RetrievalParams
    params: RetrievalParams

    @classmethod
    def tool_meta(cls, params: RetrievalParams) -> dict[str, Any]:
        """The function an Agent offers its model for this tool (OpenAI `function` shape)."""
        return {"name": TOOL_NAME, "description": str(params.description or TOOL_DESCRIPTION),
                "parameters": TOOL_PARAMETERS}

    def thoughts(self, ctx: NodeContext) -> str:
        return "Searching the datasets..."

    async def run(self, ctx: NodeContext) -> None:
        raw = self.params.query
        if not isinstance(raw, str) or not raw.strip():
            raw = "sys.query"
        query = await ctx.value(raw) if ctx.is_ref(raw) else await ctx.render(raw)
        await self.retrieve(ctx, "" if query is None else str(query))

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> str:
        """The Agent's `search_my_dateset(query)`: same search, references recorded; returns the text."""
        await self.retrieve(ctx, str(arguments.get("query") or ""))
        return str(ctx.output("formalized_content", ""))

    @traced_retrieval
    async def retrieve(self, ctx: NodeContext, query: str) -> None:
        cid, p = ctx.component_id, self.params
        empty = str(p.empty_response or "")
        query = _USER_PREFIX.sub("", query.strip())
        ctx.set_input("query", query)
        ctx.set_output("json", [])
        if not query:
            ctx.set_output("formalized_content", empty)
            return
        client: RetrievalClient | None = ctx.services.retrieval
        if client is None:
            raise RuntimeError(f"{cid}: no retrieval service is configured")
        tenant = (ctx.request.tenant_id if ctx.request else "") or ""
        dataset_ids = await self._dataset_ids(ctx, client, tenant)
        conditions, logic = await self._metadata_filter(ctx)
        found = await self._call(cid, client.search(
            tenant, query, dataset_ids,
            top_n=_number(p.top_n, int, DEFAULTS["top_n"]), top_k=_number(p.top_k, int, DEFAULTS["top_k"]),
            similarity_threshold=_number(p.similarity_threshold, float, DEFAULTS["similarity_threshold"]),
            keywords_similarity_weight=_number(p.keywords_similarity_weight, float,
                                               DEFAULTS["keywords_similarity_weight"]),
            rerank_model=str(p.rerank_id or ""), metadata_filter=conditions, metadata_logic=logic))
        chunks = [chunk_view(c) for c in found]
        if not chunks:
            ctx.set_output("formalized_content", empty)
            return
        add_reference(ctx, chunks)
        ctx.set_output("json", chunks)
        ctx.set_output("formalized_content", formalize(chunks))

    async def _dataset_ids(self, ctx: NodeContext, client: RetrievalClient, tenant: str) -> list[str]:
        cid = ctx.component_id
        raw = self.params.kb_ids or self.params.dataset_ids or []
        out: list[str] = []
        for item in [raw] if isinstance(raw, str) else raw:
            item = str(item).strip()
            if "@" not in item:
                if item:
                    out.append(item)
                continue
            value = await ctx.value(item)  # a reference: dataset names or ids, one or a list
            for name_or_id in value if isinstance(value, list) else [value]:
                name_or_id = str(name_or_id or "").strip()
                if not name_or_id:
                    continue
                dataset = await self._call(cid, client.find_dataset(tenant, name_or_id))
                out.append(dataset.id if dataset else name_or_id)
        out = list(dict.fromkeys(out))
        if not out:
            raise FieldError(cid, "params.kb_ids", "No dataset is selected.")
        return out

    async def _metadata_filter(self, ctx: NodeContext) -> tuple[list[MetadataCondition], str]:
        spec = self.params.meta_data_filter or {}
        if not isinstance(spec, dict) or not spec:
            return [], "and"
        method = spec.get("method")
        if method != "manual":
            log.warning("%s: meta_data_filter method %r is not supported (only 'manual'); searching without it",
                        ctx.component_id, method)
            return [], "and"
        conditions = []
        for flt in spec.get("manual") or []:
            if isinstance(flt, dict) and flt.get("key"):
                value = await ctx.render(str(flt.get("value", "")))
                conditions.append(MetadataCondition(key=str(flt["key"]), operator=str(flt.get("op") or flt.get("operator") or "="),
                                                    value=value))
        return conditions, str(spec.get("logic") or "and")

    @staticmethod
    async def _call(cid: str, call: Awaitable[T]) -> T:
        """A retrieval call, its failures told in this component's terms (a bad dataset names kb_ids)."""
        try:
            return await call
        except NotFound as exc:
            raise FieldError(cid, "params.kb_ids", exc.message) from None
        except InvalidArgument as exc:
            raise FieldError(cid, "params", exc.message) from None
        except DeadlineExceeded:
            raise TimeoutError(f"{cid}: the retrieval service did not answer in time") from None
        except (Unavailable, Cancelled) as exc:  # "the retrieval service is unavailable: ..."
            raise RuntimeError(f"{cid}: {exc.message}") from None
        except ServiceError as exc:
            raise RuntimeError(f"{cid}: retrieval service: {exc.message}") from None
