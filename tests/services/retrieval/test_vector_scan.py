"""The in-memory vector scan split in row blocks over a thread pool returns the exact top k, and the
keyword side leaves out the FTS5 scope filter only when it filters nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from services.retrieval.backends import _vector_index as vindex
from services.retrieval.backends import sqlite as sqlite_backend
from services.retrieval.backends.sqlite import SqliteBackend
from services.retrieval.models import CandidateQuery, ChunkRecord, Dataset, DocStatus, Document, new_id


def _exact(matrix: np.ndarray, rowids: np.ndarray, q: np.ndarray, k: int, keep: np.ndarray) -> list[int]:
    scores = np.where(keep, matrix @ q, -np.inf)
    order = np.lexsort((np.arange(len(scores)), -scores))[: min(k, int(keep.sum()))]
    return rowids[order].tolist()


def test_blocked_threaded_scan_is_exact_with_deletions_and_document_filters(monkeypatch):
    monkeypatch.setattr(vindex, "BLOCK_ROWS", 1000)  # 4,500 rows: 5 blocks, made 6 for two threads
    rng = np.random.default_rng(1)
    n, dim = 4500, 16
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    rowids = np.arange(10_000, 10_000 + n)
    docs = [f"d{i % 7}" for i in range(n)]
    index = vindex.VectorIndex(dim, capacity=64)
    index.add(rowids.tolist(), docs, matrix)
    dead = rng.choice(n, 300, replace=False)
    index.remove(rowids[dead].tolist())
    alive = np.ones(n, dtype=bool)
    alive[dead] = False
    in_d3 = np.array([d in ("d3", "d5") for d in docs])
    with ThreadPoolExecutor(2) as pool:
        for _ in range(5):
            q = rng.standard_normal(dim).astype(np.float32)
            q /= np.linalg.norm(q)
            for k in (1, 8, 64, 5000):
                got = vindex.submit_search(index.snapshot(), q, k, None, pool)()
                assert got == _exact(matrix, rowids, q, k, alive) == vindex.search(index.snapshot(), q, k, None)
                only = vindex.submit_search(index.snapshot(), q, k, frozenset({"d3", "d5", "nope"}), pool)()
                assert only == _exact(matrix, rowids, q, k, alive & in_d3)
        assert vindex.submit_search(index.snapshot(), q, 5, frozenset({"nope"}), pool)() == []
        assert vindex.submit_search(vindex.VectorIndex(dim).snapshot(), q, 5, None, pool)() == []


@pytest.fixture
async def two_datasets(tmp_path):
    backend = SqliteBackend(tmp_path)
    await backend.open()
    made = []
    for name, word in (("a", "alpha"), ("b", "beta")):
        ds = Dataset(new_id(), "t", name, embedding_model="m", dimension=4)
        await backend.create_dataset(ds)
        await backend.set_embedding("t", ds.id, "m", 4)
        doc = Document(new_id(), ds.id, f"{name}.txt", "text/plain", 1, DocStatus.DONE, chunk_count=3)
        chunks = [ChunkRecord(new_id(), f"{word} shared text {i}", [1.0, 0.0, 0.0, 0.0], []) for i in range(3)]
        await backend.put_document("t", doc)
        await backend.replace_chunks("t", ds, doc, chunks)
        made.append((await backend.get_dataset("t", ds.id), doc))
    yield backend, made
    await backend.aclose()


async def test_keyword_scope_is_dropped_only_when_the_datasets_hold_every_chunk(two_datasets, monkeypatch):
    backend, [(a, doc_a), (b, doc_b)] = two_datasets
    seen: list[bool] = []
    real = sqlite_backend._keyword_hits

    def spy(conn, q, terms, scoped=True):
        seen.append(scoped)
        return real(conn, q, terms, scoped)

    monkeypatch.setattr(sqlite_backend, "_keyword_hits", spy)

    async def search(*datasets: Dataset) -> set[str]:
        q = CandidateQuery("t", datasets, "shared", ("shared",), True, {}, None, 64, 0.0)
        return {c.document_id for c in (await backend.candidates(q)).items}

    assert await search(a) == {doc_a.id} and seen[-1] is True  # b's chunks exist: filter by scope
    assert await search(a, b) == {doc_a.id, doc_b.id} and seen[-1] is False  # everything: no filter needed
    # Another tenant's search never sees these chunks, scope or not (the fetch checks tenant and dataset).
    other = CandidateQuery("t2", (a, b), "shared", ("shared",), True, {}, None, 64, 0.0)
    assert (await backend.candidates(other)).items == []
