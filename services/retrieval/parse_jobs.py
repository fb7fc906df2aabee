"""Parsing stored documents in the background, and stopping it (RAGFlow's parse / stop-parse).

`start` marks each document RUNNING and answers at once; a task per document parses its kept file
(Ingestor.parse_stored) and leaves it DONE or FAILED. `stop` cancels a document's task and leaves it
CANCELLED without chunks. A document parsed again while its parse runs starts over; deleting a document or
its dataset stops its parse first (`forget`).

The tasks live in this process: a retrieval service that stops while documents parse leaves them RUNNING
until they are parsed again (RAGFlow's task executor has the same window between a crash and a re-run).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Sequence

from services.common.errors import NotFound
from services.retrieval.backends.base import Backend
from services.retrieval.ingest import Ingestor
from services.retrieval.models import DocStatus, Document, now

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Job:
    dataset_id: str
    task: asyncio.Task


class ParseJobs:
    def __init__(self, backend: Backend, ingestor: Ingestor) -> None:
        self.backend = backend
        self.ingestor = ingestor
        self._jobs: dict[tuple[str, str], _Job] = {}  # (tenant, document id) -> its running parse

    async def _documents(self, tenant_id: str, dataset_id: str, document_ids: Sequence[str]) -> list[Document]:
        if await self.backend.get_dataset(tenant_id, dataset_id) is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        wanted = list(dict.fromkeys(document_ids))
        found = {d.id: d for d in await self.backend.get_documents(tenant_id, [dataset_id], wanted)}
        missing = [i for i in wanted if i not in found]
        if missing:
            raise NotFound(f"documents not found in dataset {dataset_id!r}: {', '.join(missing)}")
        return [found[i] for i in wanted]

    async def start(self, tenant_id: str, dataset_id: str, document_ids: Sequence[str]) -> list[Document]:
        docs = await self._documents(tenant_id, dataset_id, document_ids)
        for doc in docs:
            await self._cancel(tenant_id, doc.id)
            doc.status, doc.error, doc.updated_at = DocStatus.RUNNING, "", now()
            await self.backend.put_document(tenant_id, doc)
            task = asyncio.create_task(self._parse(tenant_id, dataset_id, dataclasses.replace(doc)),
                                       name=f"parse {doc.id}")
            self._jobs[(tenant_id, doc.id)] = _Job(dataset_id, task)
        return docs

    async def _parse(self, tenant_id: str, dataset_id: str, doc: Document) -> None:
        try:
            await self.ingestor.parse_stored(tenant_id, dataset_id, doc)
        finally:
            job = self._jobs.get((tenant_id, doc.id))
            if job is not None and job.task is asyncio.current_task():
                del self._jobs[(tenant_id, doc.id)]

    async def stop(self, tenant_id: str, dataset_id: str, document_ids: Sequence[str]) -> tuple[list[Document], list[Document]]:
        """(stopped: now CANCELLED, not running: left as they are)."""
        docs = await self._documents(tenant_id, dataset_id, document_ids)
        stopped, idle = [], []
        for doc in docs:
            if not await self._cancel(tenant_id, doc.id):
                idle.append(doc)
                continue
            current = await self.backend.get_documents(tenant_id, [dataset_id], [doc.id])
            if not current:
                continue
            doc = current[0]
            had_chunks = doc.chunk_count > 0
            doc.status, doc.chunk_count, doc.updated_at = DocStatus.CANCELLED, 0, now()
            doc.error = "Task stopped by user."
            ds = await self.backend.get_dataset(tenant_id, dataset_id)
            if had_chunks and ds is not None:
                await self.backend.replace_chunks(tenant_id, ds, doc, [])
            else:
                await self.backend.put_document(tenant_id, doc)
            stopped.append(doc)
        return stopped, idle

    async def _cancel(self, tenant_id: str, document_id: str) -> bool:
        """Cancel the document's running parse and wait for it to end; False when none was running."""
        job = self._jobs.pop((tenant_id, document_id), None)
        if job is None or job.task.done():
            return False
        job.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job.task
        return True

    async def forget(self, tenant_id: str, *, dataset_id: str, document_id: str = "") -> None:
        """Stop the parses of a document (or of every document of a dataset) about to be deleted."""
        for (tenant, doc_id), job in list(self._jobs.items()):
            if tenant == tenant_id and job.dataset_id == dataset_id and document_id in ("", doc_id):
                await self._cancel(tenant, doc_id)

    async def aclose(self) -> None:
        for tenant, doc_id in list(self._jobs):
            await self._cancel(tenant, doc_id)
