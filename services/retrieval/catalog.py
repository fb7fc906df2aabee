"""Changing what describes a dataset or a document (RAGFlow's dataset and document updates).

A dataset: its name, description, settings, pagerank, and its embedding model while it holds no chunks (vectors of
two models cannot be compared; a change resets its vector size for the next ingest). A document: its
name, metadata, settings, and whether search sees its chunks (`disabled`). Chunks are never touched here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from typing import Any

from services.common.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from services.retrieval.backends.base import Backend
from services.retrieval.models import Dataset, Document, now

NAME_LIMIT = 128  # a dataset's name, as CreateDataset


def _name(value: str, what: str, limit: int | None = None) -> str:
    name = value.strip()
    if not name:
        raise InvalidArgument(f"name must not be empty (the {what}'s name)")
    if limit is not None and len(name) > limit:
        raise InvalidArgument(f"name is longer than {limit} characters")
    return name


class Catalog:
    def __init__(self, backend: Backend, document_locks: defaultdict[str, asyncio.Lock]) -> None:
        self.backend = backend
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
            if ds.chunk_count:
                raise FailedPrecondition(f"the dataset holds {ds.chunk_count} chunks embedded with "
                                         f"{ds.embedding_model!r}: its embedding model can change only while it holds none")
            changed.embedding_model, changed.dimension = embedding_model.strip(), 0
        await self.backend.update_dataset(changed)  # AlreadyExists when the name is another dataset's
        return changed

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
