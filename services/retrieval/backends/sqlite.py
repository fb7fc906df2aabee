"""The embedded backend: one SQLite database (`retrieval.sqlite3` in the data directory) with FTS5 and sqlite-vec.

Tables: `datasets`, `documents`, `document_files` (each document's uploaded file), `chunks` (content,
positions, float32 vector), `chunks_fts` (FTS5,
contentless with deletes, BM25; its `scope` column holds a token per dataset so a search reads only its
datasets' postings), `chunks_terms` (fts5vocab: document frequencies for term weights), and one sqlite-vec
`vec0` table per dataset (`vec_<dataset id>`, cosine). Nearest neighbours come from the in-memory index
(`_vector_index.py`) when the dataset fits its budget, else from the vec0 table.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from services.common.errors import AlreadyExists, InvalidArgument
from services.retrieval import scoring
from services.retrieval.backends import _vector_index as vindex
from services.retrieval.backends._sqlite_db import IntegrityError, SqliteRunner, Transaction
from services.retrieval.backends.base import Backend
from services.retrieval.models import Candidate, CandidateQuery, CandidateSet, ChunkRecord, Dataset, DocStatus, Document

DB_FILE = "retrieval.sqlite3"
_COMMON_SHARE = 0.2  # a term in more than this share of all chunks is not worth a BM25 pass (see _match_terms)
_COMMON_MIN_DOCS = 5000  # ... but below this many postings, walking them is cheap: keep the term
_ID = re.compile(r"^[0-9a-f]{32}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets(
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
  embedding_model TEXT NOT NULL, chunk_size INTEGER NOT NULL, chunk_overlap INTEGER NOT NULL,
  dimension INTEGER NOT NULL, created_at REAL NOT NULL, settings TEXT NOT NULL DEFAULT '',
  updated_at REAL NOT NULL DEFAULT 0, pagerank INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX IF NOT EXISTS datasets_by_name ON datasets(tenant_id, name);
CREATE TABLE IF NOT EXISTS documents(
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, dataset_id TEXT NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,
  name TEXT NOT NULL, mime_type TEXT NOT NULL, size INTEGER NOT NULL, status INTEGER NOT NULL, error TEXT NOT NULL,
  chunk_count INTEGER NOT NULL, metadata_json TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
  disabled INTEGER NOT NULL DEFAULT 0, settings TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS documents_by_dataset ON documents(dataset_id, created_at);
CREATE TABLE IF NOT EXISTS chunks(
  pk INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL, dataset_id TEXT NOT NULL,
  document_id TEXT NOT NULL, content TEXT NOT NULL, positions TEXT NOT NULL, vector BLOB NOT NULL,
  extra TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id);
CREATE TABLE IF NOT EXISTS document_files(
  document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE, content BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_dataset ON chunks(dataset_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
  content, scope, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_terms USING fts5vocab(chunks_fts, col);
"""

_DATASET_COLS = ("d.id, d.tenant_id, d.name, d.description, d.embedding_model, d.chunk_size, d.chunk_overlap, d.dimension, "
                 "d.created_at, d.settings, d.updated_at, d.pagerank")
_DATASET_COUNTS = (
    "(SELECT count(*) FROM documents x WHERE x.dataset_id = d.id), "
    "(SELECT coalesce(sum(x.chunk_count), 0) FROM documents x WHERE x.dataset_id = d.id)"
)
_DOC_COLS = ("id, dataset_id, name, mime_type, size, status, error, chunk_count, metadata_json, created_at, updated_at, "
             "disabled, settings")
_ORDER = {"create_time": "d.created_at", "update_time": "d.updated_at"}


def _vec_table(dataset_id: str) -> str:
    if not _ID.match(dataset_id):  # ids are ours (uuid hex); never interpolate anything else into SQL
        raise InvalidArgument(f"malformed dataset id {dataset_id!r}")
    return f"vec_{dataset_id}"


def _scope(dataset_id: str) -> str:
    return f"s{dataset_id}"


def _dataset(row: Sequence[Any]) -> Dataset:
    return Dataset(id=row[0], tenant_id=row[1], name=row[2], description=row[3], embedding_model=row[4],
                   chunk_size=row[5], chunk_overlap=row[6], dimension=row[7], created_at=row[8], settings=row[9],
                   updated_at=row[10], pagerank=row[11], document_count=row[12], chunk_count=row[13])


def _document(row: Sequence[Any]) -> Document:
    return Document(id=row[0], dataset_id=row[1], name=row[2], mime_type=row[3], size=row[4], status=DocStatus(row[5]),
                    error=row[6], chunk_count=row[7], metadata=json.loads(row[8] or "{}"), created_at=row[9],
                    updated_at=row[10], disabled=bool(row[11]), settings=row[12])


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, data_dir: Path, *, vector_cache_bytes: int = 1 << 30, readers: int = 2) -> None:
        self.path = data_dir / DB_FILE
        self._data_dir = data_dir
        self._runner = SqliteRunner(self.path, readers=readers)
        self._cache = vindex.IndexCache(vector_cache_bytes)
        # Scans the in-memory vector matrices in row blocks while a reader thread runs the keyword side.
        self._scan_pool = ThreadPoolExecutor(2, thread_name_prefix="vector-scan")
        self._total_chunks = 0

    async def open(self) -> None:
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._total_chunks = await self._runner.write(_init)

    async def aclose(self) -> None:
        self._runner.close()
        self._scan_pool.shutdown(wait=True)

    # ------------------------------------------------------------------------------------ datasets
    async def create_dataset(self, ds: Dataset) -> None:
        def insert(conn: Any) -> None:
            try:
                conn.execute(f"INSERT INTO datasets({_DATASET_COLS.replace('d.', '')}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", (
                    ds.id, ds.tenant_id, ds.name, ds.description, ds.embedding_model, ds.chunk_size,
                    ds.chunk_overlap, ds.dimension, ds.created_at, ds.settings, ds.modified, ds.pagerank))
            except IntegrityError:
                raise AlreadyExists(f"dataset name {ds.name!r} already exists") from None

        await self._runner.write(insert)

    async def get_dataset(self, tenant_id: str, dataset_id: str) -> Dataset | None:
        def get(conn: Any) -> Dataset | None:
            row = conn.execute(f"SELECT {_DATASET_COLS}, {_DATASET_COUNTS} FROM datasets d WHERE d.id = ? AND d.tenant_id = ?",
                               (dataset_id, tenant_id)).fetchone()
            return _dataset(row) if row else None

        return await self._runner.read(get)

    async def list_datasets(self, tenant_id: str, *, name: str, offset: int, limit: int, order_by: str = "create_time",
                            ascending: bool = False) -> tuple[list[Dataset], int]:
        order = f"{_ORDER.get(order_by, _ORDER['create_time'])} {'ASC' if ascending else 'DESC'}, d.id"

        def page(conn: Any) -> tuple[list[Dataset], int]:
            where, args = "d.tenant_id = ?", [tenant_id]
            if name:
                where, args = where + " AND d.name = ?", args + [name]
            total = conn.execute(f"SELECT count(*) FROM datasets d WHERE {where}", args).fetchone()[0]
            rows = conn.execute(f"SELECT {_DATASET_COLS}, {_DATASET_COUNTS} FROM datasets d WHERE {where} "
                                f"ORDER BY {order} LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
            return [_dataset(r) for r in rows], total

        return await self._runner.read(page)

    async def update_dataset(self, ds: Dataset) -> None:
        def update(conn: Any) -> None:
            with Transaction(conn):
                if conn.execute("SELECT 1 FROM datasets WHERE tenant_id = ? AND lower(name) = lower(?) AND id != ?",
                                (ds.tenant_id, ds.name, ds.id)).fetchone():
                    raise AlreadyExists(f"dataset name {ds.name!r} already exists")
                conn.execute("UPDATE datasets SET name = ?, description = ?, embedding_model = ?, dimension = ?, "
                             "settings = ?, updated_at = ?, pagerank = ? WHERE id = ? AND tenant_id = ?",
                             (ds.name, ds.description, ds.embedding_model, ds.dimension, ds.settings, ds.modified,
                              ds.pagerank, ds.id, ds.tenant_id))
                if not ds.dimension:  # an empty dataset whose model changed: the next ingest sizes a new table
                    conn.execute(f"DROP TABLE IF EXISTS {_vec_table(ds.id)}")
            if not ds.dimension:
                self._cache.drop(ds.id)

        await self._runner.write(update)

    async def set_embedding(self, tenant_id: str, dataset_id: str, model: str, dimension: int) -> None:
        table = _vec_table(dataset_id)

        def update(conn: Any) -> None:
            with Transaction(conn):
                conn.execute("UPDATE datasets SET embedding_model = ?, dimension = ? WHERE id = ? AND tenant_id = ?",
                             (model, dimension, dataset_id, tenant_id))
                conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0("
                             f"chunk_pk INTEGER PRIMARY KEY, embedding float[{int(dimension)}] distance_metric=cosine, "
                             "document_id TEXT)")

        await self._runner.write(update)

    async def delete_dataset(self, tenant_id: str, dataset_id: str) -> bool:
        def delete(conn: Any) -> tuple[bool, int]:
            with Transaction(conn):
                if not conn.execute("SELECT 1 FROM datasets WHERE id = ? AND tenant_id = ?", (dataset_id, tenant_id)).fetchone():
                    return False, 0
                conn.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT pk FROM chunks WHERE dataset_id = ?)", (dataset_id,))
                removed = conn.execute("DELETE FROM chunks WHERE dataset_id = ?", (dataset_id,)).rowcount
                conn.execute(f"DROP TABLE IF EXISTS {_vec_table(dataset_id)}")
                conn.execute("DELETE FROM documents WHERE dataset_id = ?", (dataset_id,))
                conn.execute("DELETE FROM datasets WHERE id = ?", (dataset_id,))
            self._cache.drop(dataset_id)
            return True, removed

        found, removed = await self._runner.write(delete)
        self._total_chunks -= removed
        return found

    # ------------------------------------------------------------------------------------ documents
    async def put_document(self, tenant_id: str, doc: Document) -> None:
        await self._runner.write(lambda conn: _upsert_document(conn, tenant_id, doc))

    async def get_documents(self, tenant_id: str, dataset_ids: Sequence[str], document_ids: Sequence[str] | None = None) -> list[Document]:
        def get(conn: Any) -> list[Document]:
            sql = f"SELECT {_DOC_COLS} FROM documents WHERE tenant_id = ? AND dataset_id IN ({_marks(len(dataset_ids))})"
            args: list[Any] = [tenant_id, *dataset_ids]
            if document_ids is not None:
                sql += f" AND id IN ({_marks(len(document_ids))})"
                args += list(document_ids)
            return [_document(r) for r in conn.execute(sql, args).fetchall()]

        if not dataset_ids or (document_ids is not None and not document_ids):
            return []
        return await self._runner.read(get)

    async def list_documents(self, tenant_id: str, dataset_id: str, *, offset: int, limit: int) -> tuple[list[Document], int]:
        def page(conn: Any) -> tuple[list[Document], int]:
            args = (tenant_id, dataset_id)
            total = conn.execute("SELECT count(*) FROM documents WHERE tenant_id = ? AND dataset_id = ?", args).fetchone()[0]
            rows = conn.execute(f"SELECT {_DOC_COLS} FROM documents WHERE tenant_id = ? AND dataset_id = ? "
                                "ORDER BY created_at DESC, id LIMIT ? OFFSET ?", (*args, limit, offset)).fetchall()
            return [_document(r) for r in rows], total

        return await self._runner.read(page)

    async def delete_document(self, tenant_id: str, dataset_id: str, document_id: str) -> bool:
        def delete(conn: Any) -> tuple[bool, list[int]]:
            with Transaction(conn):
                found = conn.execute("DELETE FROM documents WHERE id = ? AND dataset_id = ? AND tenant_id = ?",
                                     (document_id, dataset_id, tenant_id)).rowcount
                old = _drop_chunks(conn, dataset_id, document_id) if found else []
            _unindex(self._cache, dataset_id, old)
            return bool(found), old

        found, old = await self._runner.write(delete)
        self._total_chunks -= len(old)
        return found

    async def put_file(self, tenant_id: str, dataset_id: str, document_id: str, content: bytes) -> None:
        def put(conn: Any) -> None:
            if conn.execute("SELECT 1 FROM documents WHERE id = ? AND dataset_id = ? AND tenant_id = ?",
                            (document_id, dataset_id, tenant_id)).fetchone():
                conn.execute("INSERT OR REPLACE INTO document_files VALUES(?, ?)", (document_id, content))

        await self._runner.write(put)

    async def get_file(self, tenant_id: str, dataset_id: str, document_id: str) -> bytes | None:
        def get(conn: Any) -> bytes | None:
            row = conn.execute("SELECT f.content FROM document_files f JOIN documents d ON d.id = f.document_id "
                               "WHERE d.id = ? AND d.dataset_id = ? AND d.tenant_id = ?",
                               (document_id, dataset_id, tenant_id)).fetchone()
            return bytes(row[0]) if row else None

        return await self._runner.read(get)

    # ------------------------------------------------------------------------------------ chunks
    async def replace_chunks(self, tenant_id: str, dataset: Dataset, doc: Document, chunks: Sequence[ChunkRecord]) -> None:
        table = _vec_table(dataset.id)
        vectors = (np.asarray([c.vector for c in chunks], dtype=np.float32).reshape(len(chunks), -1) if chunks
                   else np.zeros((0, dataset.dimension), dtype=np.float32))  # every chunk of a document deleted

        def replace(conn: Any) -> tuple[int, int]:
            with Transaction(conn):
                old = _drop_chunks(conn, dataset.id, doc.id)
                first = conn.execute("SELECT coalesce(max(pk), 0) + 1 FROM chunks").fetchone()[0]
                pks = list(range(first, first + len(chunks)))
                conn.executemany("INSERT INTO chunks VALUES(?,?,?,?,?,?,?,?,?)", [
                    (pk, c.id, tenant_id, dataset.id, doc.id, c.content, json.dumps(c.positions), vectors[i].tobytes(),
                     json.dumps(c.extra, ensure_ascii=False) if c.extra else "")
                    for i, (pk, c) in enumerate(zip(pks, chunks))])
                conn.executemany("INSERT INTO chunks_fts(rowid, content, scope) VALUES(?,?,?)",
                                 [(pk, _indexed_text(c), _scope(dataset.id)) for pk, c in zip(pks, chunks)])
                conn.executemany(f"INSERT INTO {table}(chunk_pk, embedding, document_id) VALUES(?,?,?)",
                                 [(pk, vectors[i].tobytes(), doc.id) for i, pk in enumerate(pks)])
                _upsert_document(conn, tenant_id, doc)
            _unindex(self._cache, dataset.id, old)
            index = self._cache.get(dataset.id)
            if index is not None and pks:
                index.add(pks, [doc.id] * len(pks), vectors)
            return len(old), len(pks)

        removed, added = await self._runner.write(replace)
        self._total_chunks += added - removed

    async def get_chunks(self, tenant_id: str, dataset_id: str, document_id: str) -> list[ChunkRecord]:
        def get(conn: Any) -> list[ChunkRecord]:
            rows = conn.execute("SELECT id, content, positions, vector, extra FROM chunks WHERE tenant_id = ? AND "
                                "dataset_id = ? AND document_id = ? ORDER BY pk", (tenant_id, dataset_id, document_id)).fetchall()
            return [ChunkRecord(r[0], r[1], np.frombuffer(r[3], dtype=np.float32).tolist(), json.loads(r[2] or "[]"),
                                json.loads(r[4]) if r[4] else {}) for r in rows]

        return await self._runner.read(get)

    async def candidates(self, query: CandidateQuery) -> CandidateSet:
        indexes: dict[str, vindex.Snapshot] = {}
        for ds in query.datasets:
            if ds.id not in query.vectors or not ds.dimension:
                continue
            index = self._cache.get(ds.id)
            if index is None and self._cache.fits(ds.chunk_count, ds.dimension):
                index = await self._runner.write(self._load_index, ds.id, ds.dimension)
            if index is not None:
                indexes[ds.id] = index.snapshot()
        # When the searched datasets hold every chunk in the database, FTS5 need not intersect the matches
        # with their scope tokens (a posting list as long as the datasets; docs/speed-policies.md has its cost).
        scoped = sum(ds.chunk_count for ds in query.datasets) < self._total_chunks
        # One trip to a reader thread, which runs the keyword side while the scan pool runs the vector side.
        return await self._runner.read(_collect, query, indexes, max(self._total_chunks, 1), self._scan_pool, scoped)

    def _load_index(self, conn: Any, dataset_id: str, dimension: int) -> vindex.VectorIndex:
        # On the writer thread, so no write slips in between the read and the registration.
        existing = self._cache.get(dataset_id)
        if existing is not None:
            return existing
        rows = conn.execute("SELECT pk, document_id, vector FROM chunks WHERE dataset_id = ?", (dataset_id,)).fetchall()
        index = vindex.VectorIndex(dimension, capacity=2 * len(rows))
        if rows:
            matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), dimension)
            index.add([r[0] for r in rows], [r[1] for r in rows], matrix)
        self._cache.put(dataset_id, index)
        return index


# ---------------------------------------------------------------------------------------- thread-side helpers
def _init(conn: Any) -> int:
    conn.executescript(_SCHEMA)
    if "settings" not in {r[1] for r in conn.execute("PRAGMA table_info(datasets)")}:  # databases made before it
        conn.execute("ALTER TABLE datasets ADD COLUMN settings TEXT NOT NULL DEFAULT ''")
    if "extra" not in {r[1] for r in conn.execute("PRAGMA table_info(chunks)")}:
        conn.execute("ALTER TABLE chunks ADD COLUMN extra TEXT NOT NULL DEFAULT ''")
    if "updated_at" not in {r[1] for r in conn.execute("PRAGMA table_info(datasets)")}:
        conn.execute("ALTER TABLE datasets ADD COLUMN updated_at REAL NOT NULL DEFAULT 0")
        conn.execute("UPDATE datasets SET updated_at = created_at")
    if "pagerank" not in {r[1] for r in conn.execute("PRAGMA table_info(datasets)")}:
        conn.execute("ALTER TABLE datasets ADD COLUMN pagerank INTEGER NOT NULL DEFAULT 0")
    if "disabled" not in {r[1] for r in conn.execute("PRAGMA table_info(documents)")}:
        conn.execute("ALTER TABLE documents ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0")
        conn.execute("ALTER TABLE documents ADD COLUMN settings TEXT NOT NULL DEFAULT ''")
    return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def _indexed_text(c: ChunkRecord) -> str:
    """What the keyword index holds for a chunk: its content, then its important keywords and questions."""
    extra = scoring.keyword_text(c.extra) if c.extra else ""
    return f"{c.content}\n{extra}" if extra else c.content


def _upsert_document(conn: Any, tenant_id: str, doc: Document) -> None:
    conn.execute(
        f"INSERT INTO documents(tenant_id, {_DOC_COLS}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET "
        "name = excluded.name, mime_type = excluded.mime_type, size = excluded.size, status = excluded.status, "
        "error = excluded.error, chunk_count = excluded.chunk_count, metadata_json = excluded.metadata_json, "
        "updated_at = excluded.updated_at, disabled = excluded.disabled, settings = excluded.settings",
        (tenant_id, doc.id, doc.dataset_id, doc.name, doc.mime_type, doc.size, int(doc.status), doc.error,
         doc.chunk_count, json.dumps(doc.metadata, ensure_ascii=False), doc.created_at, doc.updated_at,
         int(doc.disabled), doc.settings))


def _drop_chunks(conn: Any, dataset_id: str, document_id: str) -> list[int]:
    old = [r[0] for r in conn.execute("SELECT pk FROM chunks WHERE document_id = ?", (document_id,)).fetchall()]
    if old:
        conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", [(pk,) for pk in old])
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (_vec_table(dataset_id),)).fetchone():
            conn.executemany(f"DELETE FROM {_vec_table(dataset_id)} WHERE chunk_pk = ?", [(pk,) for pk in old])
        conn.execute("DELETE FROM chunks WHERE document_id = ?", (document_id,))
    return old


def _unindex(cache: vindex.IndexCache, dataset_id: str, pks: list[int]) -> None:
    index = cache.get(dataset_id)
    if index is not None and pks:
        index.remove(pks)


def _keyword_hits(conn: Any, q: CandidateQuery, terms: Sequence[str], scoped: bool = True) -> dict[int, float]:
    match = f"content : ({scoring.fts_match(terms)})"
    if scoped:
        match += " AND scope : (" + " OR ".join(f'"{_scope(ds.id)}"' for ds in q.datasets) + ")"
    sql = "SELECT f.rowid, bm25(chunks_fts, 1.0, 0.0) AS s FROM chunks_fts f"
    args: list[Any] = [match]
    if q.document_ids is not None:
        sql += f" JOIN chunks c ON c.pk = f.rowid WHERE chunks_fts MATCH ? AND c.document_id IN ({_marks(len(q.document_ids))})"
        args += sorted(q.document_ids)
    else:
        sql += " WHERE chunks_fts MATCH ?"
    rows = conn.execute(sql + " ORDER BY s LIMIT ?", [*args, q.limit]).fetchall()
    return {pk: -score for pk, score in rows}  # FTS5's bm25 is lower-is-better


def _start_vector_scans(q: CandidateQuery, indexes: dict[str, vindex.Snapshot], pool: Executor | None) -> list[Any]:
    """The in-memory exact searches, started on `pool`; each item, called, gives its rowids."""
    return [vindex.submit_search(indexes[ds.id], np.asarray(q.vectors[ds.id], dtype=np.float32), q.limit,
                                 q.document_ids, pool)
            for ds in q.datasets if ds.id in indexes and ds.id in q.vectors and ds.dimension]


def _vec0_hits(conn: Any, q: CandidateQuery, indexes: dict[str, vindex.Snapshot]) -> set[int]:
    """Nearest neighbours from sqlite-vec, for the datasets without an in-memory index."""
    found: set[int] = set()
    for ds in q.datasets:
        vec = q.vectors.get(ds.id)
        if vec is None or not ds.dimension or ds.id in indexes:
            continue
        qv = np.asarray(vec, dtype=np.float32)
        sql = f"SELECT chunk_pk FROM {_vec_table(ds.id)} WHERE embedding MATCH ? AND k = ?"
        args: list[Any] = [qv.tobytes(), q.limit]
        if q.document_ids is not None:
            sql += f" AND document_id IN ({_marks(len(q.document_ids))})"
            args += sorted(q.document_ids)
        found.update(r[0] for r in conn.execute(sql, args).fetchall())
    return found


def _doc_freqs(conn: Any, terms: Sequence[str]) -> dict[str, int]:
    if not terms:
        return {}
    rows = conn.execute(f"SELECT term, doc FROM chunks_terms WHERE col = 'content' AND term IN ({_marks(len(terms))})",
                        list(terms)).fetchall()
    return {t: int(df) for t, df in rows}


def _match_terms(terms: Sequence[str], freq: dict[str, int], total: int) -> tuple[str, ...]:
    """The terms worth a BM25 pass. A term in more than a fifth of all chunks (a stopword of this corpus)
    scores next to nothing but makes FTS5 walk a huge posting list, so it is left out of the MATCH (it still
    counts in term similarity), unless every term is that common: then the rarest one stays. Lucene's
    "common terms" query does the same. Small corpora are left alone: short posting lists cost nothing."""
    present = [t for t in terms if freq.get(t, 0) > 0]
    rare = [t for t in present if freq[t] <= max(_COMMON_SHARE * total, _COMMON_MIN_DOCS)]
    return tuple(rare or sorted(present, key=lambda t: freq[t])[:1])


def _collect(conn: Any, q: CandidateQuery, indexes: dict[str, vindex.Snapshot], total: int,
             pool: Executor | None = None, scoped: bool = True) -> CandidateSet:
    if q.document_ids is not None and not q.document_ids:
        return CandidateSet([], {t: scoring.idf(0, total) for t in q.terms})
    scans = _start_vector_scans(q, indexes, pool) if q.vectors else []  # run while this thread does FTS5
    freq = _doc_freqs(conn, q.terms)
    weights = {t: scoring.idf(freq.get(t, 0), total) for t in q.terms}
    match_terms = _match_terms(q.terms, freq, total) if q.keyword else ()
    keyword = _keyword_hits(conn, q, match_terms, scoped) if match_terms else {}
    pks = set(keyword) | (_vec0_hits(conn, q, indexes) if q.vectors else set())
    for wait in scans:
        pks.update(wait())
    return CandidateSet(_fetch(conn, q, pks, keyword) if pks else [], weights)


def _fetch(conn: Any, q: CandidateQuery, pks: set[int], keyword: dict[int, float]) -> list[Candidate]:
    # The dataset test also drops a keyword hit of another dataset that an unscoped FTS5 query let through
    # (a chunk written to another dataset after `scoped` was decided).
    ds_ids = [ds.id for ds in q.datasets]
    rows = conn.execute(f"SELECT c.pk, c.id, c.dataset_id, c.document_id, c.content, c.positions, c.vector, c.extra, "
                        f"coalesce(d.disabled, 0) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id "
                        f"WHERE c.pk IN ({_marks(len(pks))}) AND c.tenant_id = ? AND c.dataset_id IN ({_marks(len(ds_ids))})",
                        [*pks, q.tenant_id, *ds_ids]).fetchall()
    sims: list[float | None] = [None] * len(rows)
    by_dataset: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if row[2] in q.vectors:
            by_dataset.setdefault(row[2], []).append(i)
    for ds_id, members in by_dataset.items():  # one matrix product per dataset, not one per row
        qv = np.asarray(q.vectors[ds_id], dtype=np.float32)
        blobs = [rows[i][6] for i in members]
        if all(len(b) == 4 * len(qv) for b in blobs):
            scores = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), len(qv)) @ qv
            for i, score in zip(members, scores.tolist()):
                sims[i] = score
        else:
            for i in members:
                sims[i] = 0.0
    return [Candidate(cid, content, doc_id, ds_id, sims[i], keyword.get(pk, 0.0), json.loads(positions),
                      json.loads(extra) if extra else {}, bool(disabled))
            for i, (pk, cid, ds_id, doc_id, content, positions, _, extra, disabled) in enumerate(rows)]
