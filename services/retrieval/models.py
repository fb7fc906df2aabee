"""Domain types of the retrieval service: what backends store and what search returns (no protobuf here)."""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field
from typing import Any


def new_id() -> str:
    return uuid.uuid4().hex


def now() -> float:
    return time.time()


class DocStatus(enum.IntEnum):
    # Same numbers as trellis.retrieval.v1.DocumentStatus.
    PENDING = 1
    RUNNING = 2
    DONE = 3
    FAILED = 4
    CANCELLED = 5  # its parsing was stopped; it holds no chunks


@dataclass
class Dataset:
    id: str
    tenant_id: str
    name: str
    description: str = ""
    embedding_model: str = ""  # "" until the first ingest resolves the deployment default
    chunk_size: int = 192
    chunk_overlap: int = 32
    dimension: int = 0  # vector size, fixed by the first embedded chunk
    document_count: int = 0
    chunk_count: int = 0
    created_at: float = field(default_factory=now)
    settings: str = ""  # a JSON object the caller keeps with the dataset (CreateDatasetRequest.settings_json)
    updated_at: float = 0.0  # 0: never updated (read as created_at)
    pagerank: int = 0  # 0-100, added to the similarity of each of its chunks (RAGFlow's pagerank)

    @property
    def modified(self) -> float:
        return self.updated_at or self.created_at


@dataclass
class Document:
    id: str
    dataset_id: str
    name: str
    mime_type: str = ""
    size: int = 0
    status: DocStatus = DocStatus.PENDING
    error: str = ""
    chunk_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)
    disabled: bool = False  # its chunks are left out of every search
    settings: str = ""  # a JSON object the caller keeps with the document (UpdateDocumentRequest.settings_json)


@dataclass
class ChunkRecord:
    """One chunk as stored: `vector` is unit length (cosine = dot product)."""

    id: str
    content: str
    vector: list[float]
    positions: list[int] = field(default_factory=list)  # PDF page numbers (1-based) the chunk spans
    extra: dict[str, Any] = field(default_factory=dict)  # what a client set on the chunk (RAGFlow's keywords, questions)


@dataclass(frozen=True)
class MetadataCondition:
    key: str
    operator: str
    value: str


@dataclass(frozen=True)
class CandidateQuery:
    """What a backend needs to collect candidates; scoring happens in `search.py` for every backend."""

    tenant_id: str
    datasets: tuple[Dataset, ...]
    text: str  # the query text, for backends whose native hybrid search wants it
    terms: tuple[str, ...]  # normalised keyword terms (scoring.terms), weighed for term similarity
    keyword: bool  # collect keyword (BM25) candidates; False for vector-only searches
    vectors: dict[str, list[float]]  # dataset id -> query vector in that dataset's space; empty: no vector side
    document_ids: frozenset[str] | None  # None: every document of the datasets
    limit: int  # candidates wanted from each side
    alpha: float  # vector weight (1 - keywords_similarity_weight), for native hybrid search


@dataclass
class Candidate:
    """A chunk the backend found, with the vector similarity it knows (None: not computed by the backend)."""

    chunk_id: str
    content: str
    document_id: str
    dataset_id: str
    vector_similarity: float | None = None
    keyword_rank: float = 0.0  # backend's keyword score (higher is better), a tie-breaker only
    positions: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # ChunkRecord.extra: `available`, `important_keywords`...
    document_disabled: bool = False  # its document is disabled: search leaves it out


@dataclass
class CandidateSet:
    items: list[Candidate]
    term_weights: dict[str, float]  # weight per query term (idf); terms the backend cannot weigh get 1.0


@dataclass
class Hit:
    chunk_id: str
    content: str
    document_id: str
    document_name: str
    dataset_id: str
    similarity: float
    vector_similarity: float
    term_similarity: float
    metadata: dict[str, Any] = field(default_factory=dict)
    positions: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResult:
    hits: list[Hit]
    total: int  # matches above the threshold before top_n
