"""Ingestion in detail: progress is visible while it runs, embeddings go out in batches, cancel is recorded."""

from __future__ import annotations

import asyncio

import numpy as np

from services.retrieval.backends.sqlite import SqliteBackend
from services.retrieval.ingest import Ingestor
from services.retrieval.llm import LlmPeer, normalize
from services.retrieval.models import Dataset, DocStatus, new_id
from tests.support.retrieval import EMBED, embedding_gateway


class GatedPeer(LlmPeer):
    """Embeddings that wait for the test to open the gate (no gRPC: this tests the pipeline's bookkeeping)."""

    def __init__(self) -> None:  # no channel
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def embed(self, texts, model=""):
        self.started.set()
        await self.gate.wait()
        return normalize(np.ones((len(texts), 4), dtype=np.float32)), "gated"


class CountingPeer(LlmPeer):
    """The real gRPC peer, counting the Embed calls it makes."""

    calls: list[int]

    async def _embed_once(self, texts, model):
        self.calls.append(len(texts))
        return await super()._embed_once(texts, model)


async def _backend(tmp_path, model: str = "") -> tuple[SqliteBackend, Dataset]:
    backend = SqliteBackend(tmp_path)
    await backend.open()
    ds = Dataset(new_id(), "t", "kb", embedding_model=model, chunk_size=16, chunk_overlap=0)
    await backend.create_dataset(ds)
    return backend, ds


async def test_status_is_running_while_embedding_then_done(tmp_path):
    backend, ds = await _backend(tmp_path)
    peer = GatedPeer()
    ingestor = Ingestor(backend, peer, max_document_bytes=1 << 20)
    task = asyncio.create_task(ingestor.ingest("t", ds.id, document_id="", name="a.txt", mime_type="",
                                               content=b"One sentence. Another sentence.", metadata_json=""))
    await asyncio.wait_for(peer.started.wait(), 10)
    docs, total = await backend.list_documents("t", ds.id, offset=0, limit=10)
    assert total == 1 and docs[0].status == DocStatus.RUNNING and docs[0].chunk_count == 0
    peer.gate.set()
    doc = await asyncio.wait_for(task, 10)
    assert doc.status == DocStatus.DONE and doc.chunk_count == 1
    stored = await backend.get_dataset("t", ds.id)
    assert (stored.embedding_model, stored.dimension, stored.chunk_count) == ("gated", 4, 1)
    await backend.aclose()


async def test_cancelled_ingest_is_recorded_as_failed(tmp_path):
    backend, ds = await _backend(tmp_path)
    peer = GatedPeer()
    ingestor = Ingestor(backend, peer, max_document_bytes=1 << 20)
    task = asyncio.create_task(ingestor.ingest("t", ds.id, document_id="", name="a.txt", mime_type="",
                                               content=b"Some text.", metadata_json=""))
    await asyncio.wait_for(peer.started.wait(), 10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    docs, _ = await backend.list_documents("t", ds.id, offset=0, limit=10)
    assert docs[0].status == DocStatus.FAILED and "cancelled" in docs[0].error
    await backend.aclose()


async def test_embeddings_are_batched_through_llm_gateway(tmp_path):
    backend, ds = await _backend(tmp_path, EMBED)
    async with embedding_gateway() as addr:
        peer = CountingPeer.connect(addr, batch=8, concurrency=2)
        peer.calls = []
        ingestor = Ingestor(backend, peer, max_document_bytes=1 << 20)
        text = "\n\n".join(f"Paragraph {i} talks about topic number {i} at some length here." for i in range(20))
        doc = await ingestor.ingest("t", ds.id, document_id="", name="long.txt", mime_type="", content=text.encode(),
                                    metadata_json="")
        await peer.close()
    assert doc.status == DocStatus.DONE and doc.chunk_count == 20
    assert sorted(peer.calls, reverse=True) == [8, 8, 4]
    await backend.aclose()


async def test_oversized_document_is_refused(tmp_path):
    backend, ds = await _backend(tmp_path)
    ingestor = Ingestor(backend, GatedPeer(), max_document_bytes=10)
    try:
        await ingestor.ingest("t", ds.id, document_id="", name="a.txt", mime_type="", content=b"x" * 11, metadata_json="")
    except Exception as exc:
        assert "limit" in str(exc) and type(exc).__name__ == "ResourceExhausted"
    else:
        raise AssertionError("an oversized document was accepted")
    assert (await backend.list_documents("t", ds.id, offset=0, limit=10))[1] == 0
    await backend.aclose()
