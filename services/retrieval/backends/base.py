"""The storage interface every retrieval backend implements (embedded SQLite, Weaviate).

A backend stores datasets, documents and chunks, every call scoped by tenant, and collects search
candidates. It does not score them: `search.py` applies RAGFlow's hybrid formula the same way for all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from services.retrieval.models import CandidateQuery, CandidateSet, ChunkRecord, Dataset, Document


class Backend(ABC):
    name: str = ""

    async def open(self) -> None:
        """Connect and create what is missing (tables, collections). Called once before any other call."""

    async def aclose(self) -> None:
        """Release connections; idempotent."""

    # -- datasets
    @abstractmethod
    async def create_dataset(self, ds: Dataset) -> None:
        """Store a new dataset. Raises AlreadyExists when the tenant has one with that name."""

    @abstractmethod
    async def get_dataset(self, tenant_id: str, dataset_id: str) -> Dataset | None:
        """With document_count and chunk_count filled in; None when missing or another tenant's."""

    @abstractmethod
    async def list_datasets(self, tenant_id: str, *, name: str, offset: int, limit: int, order_by: str = "create_time",
                            ascending: bool = False) -> tuple[list[Dataset], int]:
        """Ordered by `order_by` ("create_time" or "update_time"), newest first unless `ascending` (RAGFlow's
        default is newest created first), with counts; and the total before paging."""

    @abstractmethod
    async def update_dataset(self, ds: Dataset) -> None:
        """Store an existing dataset's name, description, embedding model, dimension, settings and updated_at.
        Raises AlreadyExists when another dataset of the tenant has that name. A dimension of 0 (its model
        changed while it held no chunks) drops its vectors' index: the next ingest makes one in the new size."""

    @abstractmethod
    async def set_embedding(self, tenant_id: str, dataset_id: str, model: str, dimension: int) -> None:
        """Record the embedding model and vector size fixed by the dataset's first ingest."""

    @abstractmethod
    async def delete_dataset(self, tenant_id: str, dataset_id: str) -> bool:
        """Delete the dataset with its documents and chunks; False when it did not exist."""

    # -- documents
    @abstractmethod
    async def put_document(self, tenant_id: str, doc: Document) -> None:
        """Insert or update the document's row (status, error, name, disabled, settings...), leaving its chunks alone."""

    @abstractmethod
    async def get_documents(self, tenant_id: str, dataset_ids: Sequence[str], document_ids: Sequence[str] | None = None) -> list[Document]:
        """Documents of these datasets (all of them, or only `document_ids`)."""

    @abstractmethod
    async def list_documents(self, tenant_id: str, dataset_id: str, *, offset: int, limit: int) -> tuple[list[Document], int]:
        """Newest first, and the total before paging."""

    @abstractmethod
    async def delete_document(self, tenant_id: str, dataset_id: str, document_id: str) -> bool:
        """Delete the document, its chunks and its file; False when it did not exist."""

    @abstractmethod
    async def put_file(self, tenant_id: str, dataset_id: str, document_id: str, content: bytes) -> None:
        """Keep the document's uploaded file (replacing the one kept before); its row must exist."""

    @abstractmethod
    async def get_file(self, tenant_id: str, dataset_id: str, document_id: str) -> bytes | None:
        """The document's uploaded file; None when none is kept."""

    # -- chunks
    @abstractmethod
    async def replace_chunks(self, tenant_id: str, dataset: Dataset, doc: Document, chunks: Sequence[ChunkRecord]) -> None:
        """Atomically swap the document's chunks for `chunks` and store `doc` (its final status) with them.

        Readers see either the old chunks or the new ones, never a mix or none.
        """

    @abstractmethod
    async def get_chunks(self, tenant_id: str, dataset_id: str, document_id: str) -> list[ChunkRecord]:
        """The document's chunks with their vectors, in their stored order (for editing one chunk)."""

    @abstractmethod
    async def candidates(self, query: CandidateQuery) -> CandidateSet:
        """Up to `query.limit` keyword (when `query.keyword`) and `query.limit` vector candidates,
        deduplicated, each with its cosine similarity to its dataset's query vector when the query has
        vectors, its `extra` and whether its document is disabled; and a weight per query term for term similarity (rarer terms weigh more,
        1.0 if unknown). The keyword side matches a chunk's important keywords and questions (`extra`) as
        well as its content (`scoring.keyword_text`)."""
