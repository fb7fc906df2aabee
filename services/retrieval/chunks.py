"""Editing a document's chunks one by one (RAGFlow's chunk routes): list, add, update, delete.

Adding content the document already holds writes that chunk over (RAGFlow's chunk id hashes content and
document), and the document's chunk_count counts edits as RAGFlow's does: +1 per add, -n per delete of n.

Each edit reads the document's chunks, changes the list and swaps it in with `Backend.replace_chunks`, so
searches see the old chunks or the new ones, never a mix. An added or changed chunk is embedded with the
dataset's model, the same way ingestion embeds.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, ServiceError
from services.retrieval.backends.base import Backend
from services.retrieval.ingest import chunk_id
from services.retrieval.llm import LlmPeer
from services.retrieval.models import ChunkRecord, Dataset, Document, now


class ChunkEditor:
    def __init__(self, backend: Backend, llm: LlmPeer) -> None:
        self.backend = backend
        self.llm = llm
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)  # one edit per document at a time

    async def document(self, tenant_id: str, dataset_id: str, document_id: str) -> tuple[Dataset, Document]:
        ds = await self.backend.get_dataset(tenant_id, dataset_id)
        if ds is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        found = await self.backend.get_documents(tenant_id, [dataset_id], [document_id])
        if not found:
            raise NotFound(f"document {document_id!r} not found in dataset {dataset_id!r}")
        return ds, found[0]

    async def list(self, tenant_id: str, dataset_id: str, document_id: str, *, keywords: str = "",
                   chunk: str = "") -> tuple[Document, list[ChunkRecord]]:
        _, doc = await self.document(tenant_id, dataset_id, document_id)
        chunks = await self.backend.get_chunks(tenant_id, dataset_id, document_id)
        if chunk:
            chunks = [c for c in chunks if c.id == chunk]
        if keywords.strip():
            needle = keywords.strip().lower()
            chunks = [c for c in chunks if needle in c.content.lower()]
        return doc, chunks

    async def add(self, tenant_id: str, dataset_id: str, document_id: str, content: str,
                  extra: dict | None = None) -> ChunkRecord:
        if not content.strip():
            raise InvalidArgument("content is required (the chunk's text)")
        async with self.locks[document_id]:
            ds, doc = await self.document(tenant_id, dataset_id, document_id)
            chunks = await self.backend.get_chunks(tenant_id, dataset_id, document_id)
            same = next((i for i, c in enumerate(chunks) if c.content == content), None)
            if same is not None:  # RAGFlow's id hashes content and document: this chunk, written over
                new = dataclasses.replace(chunks[same], extra=dict(extra or {}))
                chunks[same] = new
            else:
                new = ChunkRecord(chunk_id(document_id, len(chunks), content), content, await self._embed(ds, content),
                                  extra=dict(extra or {}))
                chunks.append(new)
            await self._store(tenant_id, ds, doc, chunks, doc.chunk_count + 1)
            return new

    async def update(self, tenant_id: str, dataset_id: str, document_id: str, chunk: str, content: str | None,
                     extra: dict | None = None) -> ChunkRecord:
        if content is not None and not content.strip():
            raise InvalidArgument("content must not be empty")
        async with self.locks[document_id]:
            ds, doc = await self.document(tenant_id, dataset_id, document_id)
            chunks = await self.backend.get_chunks(tenant_id, dataset_id, document_id)
            index = next((i for i, c in enumerate(chunks) if c.id == chunk), None)
            if index is None:
                raise NotFound(f"chunk {chunk!r} not found in document {document_id!r}")
            old = chunks[index]
            changed = dataclasses.replace(old, extra={**old.extra, **(extra or {})})
            if content is not None and content != old.content:
                changed = dataclasses.replace(changed, content=content, vector=await self._embed(ds, content))
            if changed == old:
                return old
            chunks[index] = changed
            await self._store(tenant_id, ds, doc, chunks, doc.chunk_count)
            return chunks[index]

    async def delete(self, tenant_id: str, dataset_id: str, document_id: str, ids: list[str], *, everything: bool) -> int:
        async with self.locks[document_id]:
            ds, doc = await self.document(tenant_id, dataset_id, document_id)
            chunks = await self.backend.get_chunks(tenant_id, dataset_id, document_id)
            drop = {c.id for c in chunks} if everything else set(ids) & {c.id for c in chunks}
            if drop:
                await self._store(tenant_id, ds, doc, [c for c in chunks if c.id not in drop],
                                  max(doc.chunk_count - len(drop), 0))
            return len(drop)

    async def _embed(self, ds: Dataset, text: str) -> list[float]:
        try:
            vectors, model = await self.llm.embed([text], ds.embedding_model)
        except ServiceError as exc:
            raise FailedPrecondition(f"embedding failed: {exc.message}") from None
        if not ds.dimension:  # nothing embedded in this dataset yet: this chunk fixes its model and vector size
            await self.backend.set_embedding(ds.tenant_id, ds.id, ds.embedding_model or model, vectors.shape[1])
            ds.embedding_model, ds.dimension = ds.embedding_model or model, vectors.shape[1]
        if ds.dimension and vectors.shape[1] != ds.dimension:
            raise FailedPrecondition(f"the embedding model returns {vectors.shape[1]}-dimensional vectors, but the "
                                     f"dataset holds {ds.dimension}-dimensional ones")
        return vectors[0]

    async def _store(self, tenant_id: str, ds: Dataset, doc: Document, chunks: list[ChunkRecord], count: int) -> None:
        """`count` is the document's chunk_count after the edit: RAGFlow's counter, which each add raises by
        one (an add of content the document holds too) and each delete lowers by the chunks it removed."""
        done = dataclasses.replace(doc, chunk_count=count, updated_at=now())
        await self.backend.replace_chunks(tenant_id, ds, done, chunks)
