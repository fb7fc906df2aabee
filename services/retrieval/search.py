"""Hybrid search: candidates from the backend, RAGFlow's scoring, threshold, optional rerank, top_n.

    similarity = w * term_similarity + (1 - w) * vector_similarity + pagerank,   w = keywords_similarity_weight

where pagerank is its dataset's (0-100, RAGFlow adds it as is, threshold included; 0 by default).
w = 1 is keyword-only (no query embedding is computed), w = 0 vector-only. A chunk switched off
(`available: false` in its extra) or of a disabled document is never returned. With a rerank model, the best
`rerank_limit` candidates are rescored and the model's score takes the vector side's place, as RAGFlow's
`rerank_by_model` does (its `vector_similarity` then reports the rerank score).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from services.common.errors import InvalidArgument, NotFound
from services.retrieval import metadata_filter, scoring
from services.retrieval.backends.base import Backend
from services.retrieval.llm import LlmPeer
from services.retrieval.models import Candidate, CandidateQuery, Dataset, Hit, MetadataCondition, SearchResult

log = logging.getLogger(__name__)

DEFAULT_TOP_N = 8
DEFAULT_TOP_K = 1024


@dataclass(frozen=True)
class SearchParams:
    tenant_id: str
    query: str
    dataset_ids: tuple[str, ...]
    document_ids: tuple[str, ...] = ()
    top_n: int = DEFAULT_TOP_N
    top_k: int = DEFAULT_TOP_K
    similarity_threshold: float = 0.2
    keywords_similarity_weight: float = 0.5
    rerank_model: str = ""
    metadata_filter: tuple[MetadataCondition, ...] = field(default_factory=tuple)
    metadata_logic: str = "and"


@dataclass
class _Scored:
    cand: Candidate
    term: float
    vector: float
    sim: float
    keyword_hits: int = 0  # query terms among the chunk's important keywords and questions: breaks ties
    pagerank: int = 0  # its dataset's, added to `sim`


def _check(p: SearchParams) -> None:
    if not p.dataset_ids:
        raise InvalidArgument("dataset_ids is required: name at least one dataset to search")
    if not 0.0 <= p.keywords_similarity_weight <= 1.0:
        raise InvalidArgument(f"keywords_similarity_weight must be between 0 and 1, got {p.keywords_similarity_weight}")
    if p.top_n < 0 or p.top_k < 0:
        raise InvalidArgument("top_n and top_k must not be negative")


class Searcher:
    def __init__(self, backend: Backend, llm: LlmPeer, *, max_candidates: int = 64, rerank_limit: int = 64) -> None:
        self.backend = backend
        self.llm = llm
        self.max_candidates = max_candidates
        self.rerank_limit = rerank_limit

    async def datasets(self, tenant_id: str, dataset_ids: tuple[str, ...]) -> list[Dataset]:
        unique = list(dict.fromkeys(dataset_ids))
        found = await asyncio.gather(*(self.backend.get_dataset(tenant_id, d) for d in unique))
        missing = [d for d, ds in zip(unique, found) if ds is None]
        if missing:
            raise NotFound(f"dataset {missing[0]!r} not found")
        return [ds for ds in found if ds is not None]

    async def search(self, p: SearchParams) -> SearchResult:
        _check(p)
        datasets = await self.datasets(p.tenant_id, p.dataset_ids)
        query = p.query.strip()
        if not query:
            return SearchResult([], 0)
        allowed = await self._allowed_documents(p, datasets)
        if allowed is not None and not allowed:
            return SearchResult([], 0)
        weight = p.keywords_similarity_weight
        terms = scoring.terms(query)
        vectors = await self._query_vectors(query, datasets) if weight < 1.0 else {}
        top_n = p.top_n or DEFAULT_TOP_N
        limit = min(p.top_k or DEFAULT_TOP_K, max(self.max_candidates, top_n))
        # Vector-only searches skip the keyword side (term similarity is still reported for what is found).
        cq = CandidateQuery(p.tenant_id, tuple(datasets), query, terms, weight > 0 and bool(terms), vectors, allowed,
                            limit, 1.0 - weight)
        ds_ids = [d.id for d in datasets]
        found = await self.backend.candidates(cq)
        matcher = scoring.term_matcher(terms)
        pageranks = {d.id: d.pagerank for d in datasets}
        scored = [self._score(c, terms, matcher, found.term_weights, weight, pageranks.get(c.dataset_id, 0))
                  for c in found.items if not c.document_disabled and scoring.available(c.extra)]
        scored.sort(key=lambda s: (-s.sim, -s.keyword_hits, -s.cand.keyword_rank, s.cand.chunk_id))
        if p.rerank_model and scored:
            scored = await self._rerank(query, scored[: max(self.rerank_limit, top_n)], p.rerank_model, weight)
        kept = [s for s in scored if s.sim >= p.similarity_threshold]
        page = kept[:top_n]
        return SearchResult(await self._hits(p.tenant_id, ds_ids, page), len(kept))

    async def _allowed_documents(self, p: SearchParams, datasets: list[Dataset]) -> frozenset[str] | None:
        allowed: set[str] | None = set(p.document_ids) if p.document_ids else None
        if p.metadata_filter:
            docs = await self.backend.get_documents(p.tenant_id, [d.id for d in datasets])
            passing = metadata_filter.filter_documents(docs, p.metadata_filter, p.metadata_logic)
            allowed = passing if allowed is None else allowed & passing
        return frozenset(allowed) if allowed is not None else None

    async def _query_vectors(self, query: str, datasets: list[Dataset]) -> dict[str, list[float]]:
        """One query embedding per embedding model in use (datasets may differ), mapped to each dataset."""
        by_model: dict[str, list[Dataset]] = {}
        for ds in datasets:
            if ds.dimension:  # an empty dataset has no vectors to compare with
                by_model.setdefault(ds.embedding_model, []).append(ds)
        out: dict[str, list[float]] = {}
        for model, group in by_model.items():
            rows, _ = await self.llm.embed([query], model)
            vec = rows[0].tolist()
            for ds in group:
                if len(vec) == ds.dimension:
                    out[ds.id] = vec
                else:
                    log.warning("query embedding of %s has %d dimensions, dataset %s has %d", model, len(vec), ds.id, ds.dimension)
        return out

    @staticmethod
    def _score(c: Candidate, terms: tuple[str, ...], matcher: frozenset[str], weights: dict[str, float],
               weight: float, pagerank: int) -> _Scored:
        in_keywords = scoring.found_terms(matcher, scoring.keyword_text(c.extra)) if c.extra else frozenset()
        found = scoring.found_terms(matcher, c.content) | in_keywords
        term = scoring.term_similarity(found, terms, weights) if terms else 0.0
        vector = c.vector_similarity or 0.0
        return _Scored(c, term, vector, scoring.hybrid(term, vector, weight) + pagerank, len(in_keywords), pagerank)

    async def _rerank(self, query: str, scored: list[_Scored], model: str, weight: float) -> list[_Scored]:
        scores = await self.llm.rerank(query, [s.cand.content for s in scored], model)
        for s, r in zip(scored, scores):
            s.vector, s.sim = r, scoring.hybrid(s.term, r, weight) + s.pagerank
        scored.sort(key=lambda s: (-s.sim, -s.keyword_hits, s.cand.chunk_id))
        return scored

    async def _hits(self, tenant_id: str, dataset_ids: list[str], page: list[_Scored]) -> list[Hit]:
        doc_ids = sorted({s.cand.document_id for s in page})
        docs = {d.id: d for d in await self.backend.get_documents(tenant_id, dataset_ids, doc_ids)} if doc_ids else {}
        hits = []
        for s in page:
            doc = docs.get(s.cand.document_id)
            hits.append(Hit(
                chunk_id=s.cand.chunk_id, content=s.cand.content, document_id=s.cand.document_id,
                document_name=doc.name if doc else "", dataset_id=s.cand.dataset_id, similarity=s.sim,
                vector_similarity=s.vector, term_similarity=s.term, metadata=doc.metadata if doc else {},
                positions=s.cand.positions, extra=s.cand.extra))
        return hits
