"""Ingestion: parse -> chunk -> embed (batched, via llm_gateway) -> store, with the document's status kept current.

A document is either ingested whole (`ingest`) or stored first, PENDING, and parsed later (`ingest(...,
store_only=True)`, then `parse_stored`, which parse_jobs.py runs in the background). The document row is
written RUNNING before any work, so ListDocuments shows progress; it ends DONE with its chunk count, or
FAILED with the reason. A failure never touches other documents, and a failed
re-ingest keeps the document's previous chunks searchable (the swap happens only on success). The uploaded
file is kept with the document as soon as its row is written (GetDocumentFile), parsed or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections import defaultdict

from services.common.json_fields import json_object
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, ServiceError
from services.retrieval.backends.base import Backend
from services.retrieval.chunking import Piece, chunk_blocks
from services.retrieval.llm import LlmPeer
from services.retrieval.models import ChunkRecord, Dataset, DocStatus, Document, new_id, now
from services.retrieval.parsing import ParseError, detect_type, parse

log = logging.getLogger(__name__)


class _Failed(Exception):
    """Ends one document's ingestion with this message as its `error`."""


def chunk_id(document_id: str, index: int, text: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{document_id}\x00{index}\x00{text}".encode())
    return h.hexdigest()


def parse_metadata(raw: str) -> dict:
    return json_object(raw, "metadata_json")


def _split(name: str, mime_type: str, content: bytes, size: int, overlap: int) -> list[Piece]:
    return chunk_blocks(parse(name, mime_type, content), size=size, overlap=overlap)


class Ingestor:
    def __init__(self, backend: Backend, llm: LlmPeer, *, max_document_bytes: int) -> None:
        self.backend = backend
        self.llm = llm
        self.max_document_bytes = max_document_bytes
        self._model_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def ingest(self, tenant_id: str, dataset_id: str, *, document_id: str, name: str, mime_type: str,
                     content: bytes, metadata_json: str, store_only: bool = False) -> Document:
        ds = await self.backend.get_dataset(tenant_id, dataset_id)
        if ds is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        if len(content) > self.max_document_bytes:
            raise ResourceExhausted(f"document {name!r} is {len(content) / 1e6:.1f} MB; the limit is "
                                    f"{self.max_document_bytes / 1e6:.0f} MB", retryable=False)
        metadata = parse_metadata(metadata_json)
        name = name.strip() or "untitled"
        try:
            kind = detect_type(name, mime_type, content)
        except ParseError as exc:
            raise InvalidArgument(f"document {name!r}: {exc}") from None
        if document_id:
            found = await self.backend.get_documents(tenant_id, [ds.id], [document_id])
            if not found:
                raise NotFound(f"document {document_id!r} not found in dataset {dataset_id!r}")
            doc = found[0]
            doc.name, doc.mime_type, doc.size, doc.metadata = name, kind, len(content), metadata
        else:
            doc = Document(new_id(), ds.id, name, kind, len(content), metadata=metadata)
        doc.status, doc.error, doc.updated_at = DocStatus.PENDING if store_only else DocStatus.RUNNING, "", now()
        await self.backend.put_document(tenant_id, doc)
        await self.backend.put_file(tenant_id, ds.id, doc.id, content)  # kept for download, parsed or not
        if store_only:
            return doc
        try:
            await self._run(tenant_id, ds, doc, content)
        except asyncio.CancelledError:
            await asyncio.shield(self._fail(tenant_id, doc, "ingestion was cancelled before it finished"))
            raise
        except _Failed as exc:
            await self._fail(tenant_id, doc, str(exc))
        except Exception:
            log.exception("ingesting document %s of dataset %s failed", doc.id, ds.id)
            await self._fail(tenant_id, doc, "internal error while ingesting; see the retrieval service log")
        return doc

    async def parse_stored(self, tenant_id: str, dataset_id: str, doc: Document) -> Document:
        """Parse, chunk and embed a stored document's kept file; `doc` (already RUNNING) ends DONE or FAILED.
        A cancellation is the caller's to record (parse_jobs.py: CANCELLED)."""
        ds = await self.backend.get_dataset(tenant_id, dataset_id)
        if ds is None:
            return doc
        try:
            content = await self.backend.get_file(tenant_id, dataset_id, doc.id)
            if not content:
                raise _Failed("the document's file is not kept (it was ingested before files were); upload it again")
            await self._run(tenant_id, ds, doc, content)
        except _Failed as exc:
            await self._fail(tenant_id, doc, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("parsing document %s of dataset %s failed", doc.id, dataset_id)
            await self._fail(tenant_id, doc, "internal error while parsing; see the retrieval service log")
        return doc

    async def _run(self, tenant_id: str, ds: Dataset, doc: Document, content: bytes) -> None:
        try:
            pieces = await asyncio.to_thread(_split, doc.name, doc.mime_type, content, ds.chunk_size, ds.chunk_overlap)
        except ParseError as exc:
            raise _Failed(str(exc)) from None
        if not pieces:
            raise _Failed("the document has no text")
        try:
            vectors, model = await self.llm.embed([p.text for p in pieces], ds.embedding_model)
        except ServiceError as exc:
            raise _Failed(f"embedding failed: {exc.message}") from None
        await self._fix_embedding(tenant_id, ds, model, vectors.shape[1])
        chunks = [ChunkRecord(chunk_id(doc.id, i, p.text), p.text, vectors[i], p.positions) for i, p in enumerate(pieces)]
        done = dataclasses.replace(doc, status=DocStatus.DONE, error="", chunk_count=len(chunks), updated_at=now())
        try:
            await self.backend.replace_chunks(tenant_id, ds, done, chunks)
        except FailedPrecondition as exc:
            raise _Failed(exc.message) from None
        doc.status, doc.error, doc.chunk_count, doc.updated_at = done.status, done.error, done.chunk_count, done.updated_at

    async def _fix_embedding(self, tenant_id: str, ds: Dataset, model: str, dimension: int) -> None:
        """The first ingest fixes the dataset's model and vector size; later ones must match them."""
        async with self._model_locks[ds.id]:
            current = await self.backend.get_dataset(tenant_id, ds.id)
            if current is None:
                raise _Failed("the dataset was deleted during ingestion")
            if current.dimension and current.dimension != dimension:
                raise _Failed(f"embedding model {model!r} returns {dimension}-dimensional vectors, but the dataset "
                              f"holds {current.dimension}-dimensional ones")
            if not current.dimension or not current.embedding_model:
                await self.backend.set_embedding(tenant_id, ds.id, current.embedding_model or model, dimension)
            ds.embedding_model, ds.dimension = current.embedding_model or model, dimension

    async def _fail(self, tenant_id: str, doc: Document, reason: str) -> None:
        kept = f" (its previous {doc.chunk_count} chunks are kept)" if doc.chunk_count else ""
        doc.status, doc.error, doc.updated_at = DocStatus.FAILED, reason + kept, now()
        log.warning("document %s (%s) failed: %s", doc.id, doc.name, doc.error)
        try:
            await self.backend.put_document(tenant_id, doc)
        except Exception:  # the dataset may be gone; the caller still gets the reason
            log.exception("could not record the failure of document %s", doc.id)
