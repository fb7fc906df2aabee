"""In-memory exact vector search for the embedded backend: one float32 matrix per dataset.

Why: sqlite-vec's vec0 scan is exact but reads every vector through SQLite pages, which over a large dataset
takes longer than the budget of a whole hybrid query; a contiguous float32 matrix scanned with numpy takes a
small part of it (the figures: docs/speed-policies.md, "Figures behind other choices"). SQLite stays
the durable copy: a matrix is loaded from it on first use and kept in step by the single writer.
Datasets that do not fit `budget_bytes` (or all of them when it is 0) are searched with sqlite-vec.

The scan (bench/retrieval_bench.py): `np.einsum("ij,j->i")` is a memory-bound SIMD loop, faster on one core
than OpenBLAS' sgemv, which needs two threads to match it, threads that spin and fight any other thread for
the cores. So the matrix is cut in row blocks that a small
thread pool scans concurrently (einsum releases the GIL), each block keeping its own top k; meanwhile
the caller's thread runs the keyword (FTS5) side of the same query. The search stays exact.

Concurrency: only the writer thread mutates; readers take `snapshot()` under the lock and compute on it
outside. Appends write past the snapshot's end and growth allocates new arrays, so a snapshot never
changes under a reader except for `alive` flags of deleted rows, which a search may see either way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class Snapshot:
    rowids: np.ndarray
    matrix: np.ndarray
    docs: np.ndarray
    alive: np.ndarray
    doc_codes: dict[str, int]
    dead: int  # deleted rows when the snapshot was taken (0: no mask needed)


class VectorIndex:
    def __init__(self, dimension: int, capacity: int = 1024) -> None:
        self.dimension = dimension
        cap = max(16, capacity)
        self._rowids = np.zeros(cap, dtype=np.int64)
        self._matrix = np.zeros((cap, dimension), dtype=np.float32)
        self._docs = np.zeros(cap, dtype=np.int32)
        self._alive = np.zeros(cap, dtype=bool)
        self._n = 0
        self._dead = 0
        self._position: dict[int, int] = {}
        self._doc_codes: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._matrix.nbytes + self._rowids.nbytes + self._docs.nbytes + self._alive.nbytes

    def __len__(self) -> int:
        return self._n - self._dead

    def add(self, rowids: Sequence[int], document_ids: Sequence[str], vectors: np.ndarray) -> None:
        count = len(rowids)
        if not count:
            return
        with self._lock:
            if self._n + count > len(self._rowids):
                self._grow(self._n + count)
            s = slice(self._n, self._n + count)
            self._rowids[s] = rowids
            self._matrix[s] = vectors
            self._docs[s] = [self._doc_codes.setdefault(d, len(self._doc_codes)) for d in document_ids]
            self._alive[s] = True
            for i, r in enumerate(rowids):
                self._position[int(r)] = self._n + i
            self._n += count

    def remove(self, rowids: Iterable[int]) -> None:
        with self._lock:
            for r in rowids:
                pos = self._position.pop(int(r), None)
                if pos is not None and self._alive[pos]:
                    self._alive[pos] = False
                    self._dead += 1
            if self._dead > 1024 and self._dead > self._n // 4:
                self._compact()

    def _grow(self, need: int) -> None:
        cap = max(need, 2 * len(self._rowids))
        self._rowids = np.concatenate([self._rowids[: self._n], np.zeros(cap - self._n, dtype=np.int64)])
        self._docs = np.concatenate([self._docs[: self._n], np.zeros(cap - self._n, dtype=np.int32)])
        self._alive = np.concatenate([self._alive[: self._n], np.zeros(cap - self._n, dtype=bool)])
        matrix = np.zeros((cap, self.dimension), dtype=np.float32)
        matrix[: self._n] = self._matrix[: self._n]
        self._matrix = matrix

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: self._n])
        n = len(keep)
        cap = max(16, 2 * n)
        rowids, docs = np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=np.int32)
        alive, matrix = np.zeros(cap, dtype=bool), np.zeros((cap, self.dimension), dtype=np.float32)
        rowids[:n], docs[:n], alive[:n], matrix[:n] = self._rowids[keep], self._docs[keep], True, self._matrix[keep]
        self._rowids, self._docs, self._alive, self._matrix = rowids, docs, alive, matrix
        self._n, self._dead = n, 0
        self._position = {int(r): i for i, r in enumerate(rowids[:n])}

    def snapshot(self) -> Snapshot:
        with self._lock:
            n = self._n
            return Snapshot(self._rowids[:n], self._matrix[:n], self._docs[:n], self._alive[:n], dict(self._doc_codes),
                            self._dead)


BLOCK_ROWS = 16_384  # rows per scan task: 6 MB of 384-d float32, short enough to spread over the pool


def search(snap: Snapshot, query: np.ndarray, k: int, document_ids: frozenset[str] | None) -> list[int]:
    """Rowids of the k rows most similar to `query` (unit vectors: dot product = cosine), best first."""
    return submit_search(snap, query, k, document_ids)()


def submit_search(snap: Snapshot, query: np.ndarray, k: int, document_ids: frozenset[str] | None,
                  pool: Executor | None = None) -> Callable[[], list[int]]:
    """Start the search of `search()`, its row blocks on `pool` (None: here, now); call the result to wait."""
    n = len(snap.rowids)
    if not n or k <= 0:
        return list
    query = np.ascontiguousarray(query, dtype=np.float32)
    mask = None
    if snap.dead:
        mask = snap.alive.copy()  # a row deleted after the snapshot may flip; decide once
    if document_ids is not None:
        codes = [snap.doc_codes[d] for d in document_ids if d in snap.doc_codes]
        if not codes:
            return list
        in_docs = np.isin(snap.docs, np.asarray(codes, dtype=np.int32))
        mask = in_docs if mask is None else mask & in_docs
    blocks = -(-n // BLOCK_ROWS)
    if pool is not None and blocks > 1:
        blocks += blocks % 2  # an even count of equal blocks keeps both scan threads busy to the end
    step = -(-n // blocks)
    bounds = [(s, min(s + step, n)) for s in range(0, n, step)]
    if pool is None or len(bounds) == 1:
        parts = [_scan(snap.matrix, mask, query, k, lo, hi) for lo, hi in bounds]
        return lambda: _merge(snap, parts, k)
    futures: list[Future[tuple[np.ndarray, np.ndarray]]] = [
        pool.submit(_scan, snap.matrix, mask, query, k, lo, hi) for lo, hi in bounds]
    return lambda: _merge(snap, [f.result() for f in futures], k)


def _scan(matrix: np.ndarray, mask: np.ndarray | None, query: np.ndarray, k: int, lo: int,
          hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(row positions, scores) of the block's best k rows, unordered."""
    scores = np.einsum("ij,j->i", matrix[lo:hi], query)
    if mask is not None:
        keep = mask[lo:hi]
        scores[~keep] = -np.inf
        k = min(k, int(np.count_nonzero(keep)))
        if k <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    if k < len(scores):
        top = np.argpartition(scores, len(scores) - k)[len(scores) - k:]
    else:
        top = np.arange(len(scores))
    return top + lo, scores[top]


def _merge(snap: Snapshot, parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[int]:
    positions = np.concatenate([p for p, _ in parts])
    scores = np.concatenate([s for _, s in parts])
    if len(scores) > k:
        keep = np.argpartition(scores, len(scores) - k)[len(scores) - k:]
        positions, scores = positions[keep], scores[keep]
    order = np.lexsort((positions, -scores))  # best first; ties in row order, so results are deterministic
    return snap.rowids[positions[order]].tolist()


class IndexCache:
    """Per-dataset indexes within a memory budget, least recently used evicted first."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._indexes: OrderedDict[str, VectorIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, dataset_id: str) -> VectorIndex | None:
        with self._lock:
            idx = self._indexes.get(dataset_id)
            if idx is not None:
                self._indexes.move_to_end(dataset_id)
            return idx

    def fits(self, rows: int, dimension: int) -> bool:
        # Twice the rows: room to grow before the matrix must be reallocated.
        return self.budget > 0 and 2 * rows * (dimension * 4 + 13) <= self.budget

    def put(self, dataset_id: str, index: VectorIndex) -> None:
        with self._lock:
            self._indexes[dataset_id] = index
            self._indexes.move_to_end(dataset_id)
            total = sum(i.nbytes for i in self._indexes.values())
            while total > self.budget and len(self._indexes) > 1:
                _, evicted = self._indexes.popitem(last=False)
                total -= evicted.nbytes

    def drop(self, dataset_id: str) -> None:
        with self._lock:
            self._indexes.pop(dataset_id, None)
