"""Changing what describes a dataset or a document (RAGFlow's dataset and document updates).

A dataset: its name, description, settings, pagerank, and its embedding model. A new model while the dataset
holds chunks re-embeds every chunk with it first (vectors of two models cannot be compared), as RAGFlow
allows the change; if that fails, nothing changes. A dataset without chunks only resets its vector size for
the next ingest. A document: its name, metadata, settings, and whether search sees its chunks (`disabled`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from typing import Any

from services.common.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ServiceError
from services.retrieval.backends.base import Backend
from services.retrieval.llm import LlmPeer
from services.retrieval.models import ChunkRecord, Dataset, Document, now

NAME_LIMIT = 128  # a dataset's name, as CreateDataset


def _name(value: str, what: str, limit: int | None = None) -> str:
    name = value.strip()
    if not name:
        raise InvalidArgument(f"name must not be empty (the {what}'s name)")
    if limit is not None and len(name) > limit:
        raise InvalidArgument(f"name is longer than {limit} characters")
    return name


class Catalog:
    def __init__(self, backend: Backend, document_locks: defaultdict[str, asyncio.Lock], llm: LlmPeer) -> None:
        self.backend = backend
        self.llm = llm
        self._locks = document_locks  # shared with the chunk editor: one write of a document at a time

    async def update_dataset(self, tenant_id: str, dataset_id: str, *, name: str | None = None,
                             description: str | None = None, embedding_model: str | None = None,
                             settings: str | None = None, pagerank: int | None = None) -> Dataset:
        ds = await self.backend.get_dataset(tenant_id, dataset_id)
        if ds is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        changed = dataclasses.replace(ds, updated_at=now())
        if name is not None:
            changed.name = _name(name, "dataset", NAME_LIMIT)
        if description is not None:
            changed.description = description
        if settings is not None:
            changed.settings = settings
        if pagerank is not None:
            if not 0 <= pagerank <= 100:
                raise InvalidArgument(f"pagerank must be between 0 and 100, got {pagerank}")
            changed.pagerank = pagerank
        if embedding_model is not None and embedding_model.strip() != ds.embedding_model:
            changed.embedding_model, changed.dimension = embedding_model.strip(), 0
            if ds.chunk_count:
                return await self._reembed(tenant_id, changed)
        await self.backend.update_dataset(changed)  # AlreadyExists when the name is another dataset's
        return changed

    async def _reembed(self, tenant_id: str, ds: Dataset) -> Dataset:
        """Store `ds` (its new model) with every chunk of its documents embedded again by that model."""
        docs = await self.backend.get_documents(tenant_id, [ds.id])
        held = [(doc, await self.backend.get_chunks(tenant_id, ds.id, doc.id)) for doc in docs]
        texts = [c.content for _, chunks in held for c in chunks]
        try:
            vectors, _ = await self.llm.embed(texts, ds.embedding_model)
        except ServiceError as exc:
            raise FailedPrecondition(f"the dataset's chunks could not be embedded with {ds.embedding_model!r}: "
                                     f"{exc.message}") from None
        await self.backend.update_dataset(ds)  # drops the old vectors' index (dimension 0)
        ds.dimension = int(vectors.shape[1]) if len(texts) else 0
        if ds.dimension:
            await self.backend.set_embedding(tenant_id, ds.id, ds.embedding_model, ds.dimension)
        row = 0
        for doc, chunks in held:
            async with self._locks[doc.id]:
                renewed = [ChunkRecord(c.id, c.content, vectors[row + i], c.positions, c.extra) for i, c in enumerate(chunks)]
                row += len(chunks)
                if renewed:
                    await self.backend.replace_chunks(tenant_id, ds, doc, renewed)
        return ds

    async def update_document(self, tenant_id: str, dataset_id: str, document_id: str, *, name: str | None = None,
                              metadata: dict[str, Any] | None = None, settings: str | None = None,
                              disabled: bool | None = None) -> Document:
        """`updated_at` stays the time of its last ingest or chunk edit."""
        async with self._locks[document_id]:
            if await self.backend.get_dataset(tenant_id, dataset_id) is None:
                raise NotFound(f"dataset {dataset_id!r} not found")
            found = await self.backend.get_documents(tenant_id, [dataset_id], [document_id])
            if not found:
                raise NotFound(f"document {document_id!r} not found in dataset {dataset_id!r}")
            doc = found[0]
            if name is not None and (name := _name(name, "document")) != doc.name:
                others = await self.backend.get_documents(tenant_id, [dataset_id])
                if any(d.name == name and d.id != doc.id for d in others):
                    raise AlreadyExists(f"document name {name!r} already exists in dataset {dataset_id!r}")
                doc.name = name
            if metadata is not None:
                doc.metadata = metadata
            if settings is not None:
                doc.settings = settings
            if disabled is not None:
                doc.disabled = disabled
            await self.backend.put_document(tenant_id, doc)
            return doc
