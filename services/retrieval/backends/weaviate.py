"""The scale-out backend: Weaviate through `weaviate-client` v4 (async), selected by TRELLIS_WEAVIATE_URL.

Layout:
- `TrellisDataset`, `TrellisDocument` and `TrellisDocumentFile` (each document's uploaded file, a blob):
  the catalog, multi-tenant collections (one Weaviate tenant per Trellis tenant), so every catalog read or
  write names its tenant and cannot see another's objects;
- `TrellisChunks_<dataset id>`: one collection per dataset for its chunks, with self-provided cosine
  vectors and a BM25 index on `content`. One collection per dataset because each dataset may use its
  own embedding model (and vector size); a dataset is reached only through its tenant's catalog.

Candidates come from Weaviate's hybrid search with `alpha` = 1 - keywords_similarity_weight (relative
score fusion), or BM25 alone / near-vector alone at the extremes. Weaviate has no transactions: on a
re-ingest the new chunks are written first and the stale ones deleted after, so for a moment a search may
see both, never neither. Term weights are uniform here (Weaviate exposes no document frequencies).

`weaviate-client` caps grpcio below the version this project pins, so it is not a declared dependency:
install it with `pip install --no-deps weaviate-client httpx authlib validators` where Weaviate is used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid as uuidlib
from typing import Any, Sequence
from urllib.parse import urlparse

import numpy as np

from services.common.errors import AlreadyExists, FailedPrecondition, ServiceError, Unavailable
from services.retrieval import scoring
from services.retrieval.backends.base import Backend
from services.retrieval.models import Candidate, CandidateQuery, CandidateSet, ChunkRecord, Dataset, DocStatus, Document

DATASETS, DOCUMENTS, FILES = "TrellisDataset", "TrellisDocument", "TrellisDocumentFile"
_PAGE = 1000
_SEARCHED = ["content", "keywords^5"]  # BM25 over the text and, boosted as RAGFlow does, important keywords and questions


def _uuid(hex_id: str) -> str:
    try:
        return str(uuidlib.UUID(hex=hex_id))
    except ValueError:  # not one of our ids: a stable uuid for it, so lookups simply find nothing
        return str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, hex_id))


def _tenant(tenant_id: str) -> str:
    # Weaviate tenant names allow [A-Za-z0-9_-]{1,64}; ours are free text.
    return "t" + hashlib.sha256(tenant_id.encode()).hexdigest()[:40]


def chunks_collection(dataset_id: str) -> str:
    return f"TrellisChunks_{dataset_id}"


class WeaviateBackend(Backend):
    name = "weaviate"

    def __init__(self, url: str, *, api_key: str = "", grpc_port: int = 50051) -> None:
        self.url = url
        self.api_key = api_key
        self.grpc_port = grpc_port
        self._client: Any = None
        self._tenants: set[tuple[str, str]] = set()
        self._checked: set[str] = set()  # chunk collections known to exist with every property

    async def open(self) -> None:
        try:
            import weaviate
            from weaviate.classes.init import Auth
        except ImportError:
            raise FailedPrecondition("TRELLIS_WEAVIATE_URL is set but weaviate-client is not installed "
                                     "(pip install --no-deps weaviate-client httpx authlib validators)") from None
        u = urlparse(self.url)
        secure = u.scheme == "https"
        self._client = weaviate.use_async_with_custom(
            http_host=u.hostname or "localhost", http_port=u.port or (443 if secure else 8080), http_secure=secure,
            grpc_host=u.hostname or "localhost", grpc_port=self.grpc_port, grpc_secure=secure,
            auth_credentials=Auth.api_key(self.api_key) if self.api_key else None)
        try:
            await self._client.connect()
        except Exception as exc:
            raise Unavailable(f"cannot reach Weaviate at {self.url}: {exc}") from None
        await self._ensure_catalog()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    # ------------------------------------------------------------------------------------ schema
    async def _ensure_catalog(self) -> None:
        from weaviate.classes.config import Configure, DataType, Property, Tokenization

        def text(name: str, field: bool = True) -> Property:
            return Property(name=name, data_type=DataType.TEXT, tokenization=Tokenization.FIELD if field else Tokenization.WORD)

        specs = {
            DATASETS: [text("dataset_id"), text("name"), text("description", False), text("embedding_model"),
                       Property(name="chunk_size", data_type=DataType.INT), Property(name="chunk_overlap", data_type=DataType.INT),
                       Property(name="dimension", data_type=DataType.INT), Property(name="created_at", data_type=DataType.NUMBER),
                       text("settings", False), Property(name="updated_at", data_type=DataType.NUMBER),
                       Property(name="pagerank", data_type=DataType.INT)],
            DOCUMENTS: [text("document_id"), text("dataset_id"), text("name"), text("mime_type"),
                        Property(name="size", data_type=DataType.INT), Property(name="status", data_type=DataType.INT),
                        text("error", False), Property(name="chunk_count", data_type=DataType.INT), text("metadata_json", False),
                        Property(name="created_at", data_type=DataType.NUMBER), Property(name="updated_at", data_type=DataType.NUMBER),
                        Property(name="disabled", data_type=DataType.BOOL), text("settings", False)],
            FILES: [text("document_id"), text("dataset_id"), Property(name="file", data_type=DataType.BLOB)],
        }
        for name, props in specs.items():
            if not await self._client.collections.exists(name):
                await self._client.collections.create(
                    name, properties=props, vector_config=Configure.Vectors.self_provided(),
                    multi_tenancy_config=Configure.multi_tenancy(enabled=True, auto_tenant_creation=True,
                                                                 auto_tenant_activation=True))
            else:  # a catalog made by an earlier version: add the properties it lacks
                await _add_missing(self._client.collections.use(name), props)

    async def _ensure_chunks(self, dataset_id: str) -> None:
        from weaviate.classes.config import Configure, DataType, Property, Tokenization, VectorDistances

        name = chunks_collection(dataset_id)
        if name in self._checked:
            return
        props = [Property(name="chunk_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
                 Property(name="document_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
                 Property(name="content", data_type=DataType.TEXT, tokenization=Tokenization.WORD),
                 Property(name="keywords", data_type=DataType.TEXT, tokenization=Tokenization.WORD),
                 Property(name="positions", data_type=DataType.INT_ARRAY),
                 Property(name="extra", data_type=DataType.TEXT, skip_vectorization=True, index_searchable=False)]
        if await self._client.collections.exists(name):
            await _add_missing(self._client.collections.use(name), props)  # made by an earlier version
            self._checked.add(name)
            return
        await self._client.collections.create(
            name, properties=props,
            vector_config=Configure.Vectors.self_provided(
                vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)))
        self._checked.add(name)

    async def _catalog(self, name: str, tenant_id: str) -> Any:
        """The catalog collection bound to the tenant, created on first use (reads of an unknown tenant fail)."""
        from weaviate.classes.tenants import Tenant

        tenant = _tenant(tenant_id)
        coll = self._client.collections.use(name)
        if (name, tenant) not in self._tenants:
            if await coll.tenants.get_by_name(tenant) is None:
                await coll.tenants.create([Tenant(name=tenant)])
            self._tenants.add((name, tenant))
        return coll.with_tenant(tenant)

    # ------------------------------------------------------------------------------------ datasets
    async def _counts(self, tenant_id: str, dataset_id: str) -> tuple[int, int]:
        from weaviate.classes.query import Filter, Metrics

        agg = await (await self._catalog(DOCUMENTS, tenant_id)).aggregate.over_all(
            filters=Filter.by_property("dataset_id").equal(dataset_id), total_count=True,
            return_metrics=Metrics("chunk_count").integer(sum_=True))
        chunk_sum = agg.properties["chunk_count"].sum_ if "chunk_count" in agg.properties else 0
        return int(agg.total_count or 0), int(chunk_sum or 0)

    async def _dataset(self, tenant_id: str, props: dict[str, Any]) -> Dataset:
        docs, chunks = await self._counts(tenant_id, props["dataset_id"])
        return Dataset(id=props["dataset_id"], tenant_id=tenant_id, name=props["name"], description=props.get("description") or "",
                       embedding_model=props.get("embedding_model") or "", chunk_size=int(props["chunk_size"]),
                       chunk_overlap=int(props["chunk_overlap"]), dimension=int(props.get("dimension") or 0),
                       document_count=docs, chunk_count=chunks, created_at=float(props["created_at"]),
                       settings=props.get("settings") or "", updated_at=float(props.get("updated_at") or 0),
                       pagerank=int(props.get("pagerank") or 0))

    async def create_dataset(self, ds: Dataset) -> None:
        from weaviate.classes.query import Filter

        coll = await self._catalog(DATASETS, ds.tenant_id)
        same = await coll.query.fetch_objects(filters=Filter.by_property("name").equal(ds.name), limit=1)
        if same.objects:
            raise AlreadyExists(f"dataset name {ds.name!r} already exists")
        await coll.data.insert(uuid=_uuid(ds.id), properties={
            "dataset_id": ds.id, "name": ds.name, "description": ds.description, "embedding_model": ds.embedding_model,
            "chunk_size": ds.chunk_size, "chunk_overlap": ds.chunk_overlap, "dimension": ds.dimension,
            "created_at": ds.created_at, "settings": ds.settings, "updated_at": ds.modified, "pagerank": ds.pagerank})
        await self._ensure_chunks(ds.id)

    async def get_dataset(self, tenant_id: str, dataset_id: str) -> Dataset | None:
        obj = await (await self._catalog(DATASETS, tenant_id)).query.fetch_object_by_id(_uuid(dataset_id))
        return await self._dataset(tenant_id, obj.properties) if obj is not None else None

    async def list_datasets(self, tenant_id: str, *, name: str, offset: int, limit: int, order_by: str = "create_time",
                            ascending: bool = False) -> tuple[list[Dataset], int]:
        from weaviate.classes.query import Filter, Sort

        coll = await self._catalog(DATASETS, tenant_id)
        where = Filter.by_property("name").equal(name) if name else None
        total = (await coll.aggregate.over_all(filters=where, total_count=True)).total_count or 0
        field = "updated_at" if order_by == "update_time" else "created_at"
        res = await coll.query.fetch_objects(filters=where, limit=limit, offset=offset,
                                             sort=Sort.by_property(field, ascending=ascending).by_property("dataset_id"))
        return [await self._dataset(tenant_id, o.properties) for o in res.objects], int(total)

    async def update_dataset(self, ds: Dataset) -> None:
        from weaviate.classes.query import Filter

        coll = await self._catalog(DATASETS, ds.tenant_id)
        same = await coll.query.fetch_objects(filters=Filter.by_property("name").equal(ds.name), limit=2)
        if any(o.properties.get("dataset_id") != ds.id for o in same.objects):
            raise AlreadyExists(f"dataset name {ds.name!r} already exists")
        await coll.data.update(uuid=_uuid(ds.id), properties={
            "name": ds.name, "description": ds.description, "embedding_model": ds.embedding_model,
            "dimension": ds.dimension, "settings": ds.settings, "updated_at": ds.modified, "pagerank": ds.pagerank})
        if not ds.dimension:  # an empty dataset whose model changed: a fresh collection takes the new size
            await self._client.collections.delete(chunks_collection(ds.id))
            self._checked.discard(chunks_collection(ds.id))
            await self._ensure_chunks(ds.id)

    async def set_embedding(self, tenant_id: str, dataset_id: str, model: str, dimension: int) -> None:
        await (await self._catalog(DATASETS, tenant_id)).data.update(
            uuid=_uuid(dataset_id), properties={"embedding_model": model, "dimension": dimension})
        await self._ensure_chunks(dataset_id)

    async def delete_dataset(self, tenant_id: str, dataset_id: str) -> bool:
        from weaviate.classes.query import Filter

        coll = await self._catalog(DATASETS, tenant_id)
        if await coll.query.fetch_object_by_id(_uuid(dataset_id)) is None:
            return False
        await self._client.collections.delete(chunks_collection(dataset_id))
        self._checked.discard(chunks_collection(dataset_id))
        await (await self._catalog(DOCUMENTS, tenant_id)).data.delete_many(where=Filter.by_property("dataset_id").equal(dataset_id))
        await (await self._catalog(FILES, tenant_id)).data.delete_many(where=Filter.by_property("dataset_id").equal(dataset_id))
        await coll.data.delete_by_id(_uuid(dataset_id))
        return True

    # ------------------------------------------------------------------------------------ documents
    async def put_document(self, tenant_id: str, doc: Document) -> None:
        from weaviate.classes.data import DataObject

        props = {"document_id": doc.id, "dataset_id": doc.dataset_id, "name": doc.name, "mime_type": doc.mime_type,
                 "size": doc.size, "status": int(doc.status), "error": doc.error, "chunk_count": doc.chunk_count,
                 "metadata_json": json.dumps(doc.metadata, ensure_ascii=False), "created_at": doc.created_at,
                 "updated_at": doc.updated_at, "disabled": doc.disabled, "settings": doc.settings}
        res = await (await self._catalog(DOCUMENTS, tenant_id)).data.insert_many([DataObject(properties=props, uuid=_uuid(doc.id))])
        _check_batch(res, "storing a document")

    @staticmethod
    def _document(p: dict[str, Any]) -> Document:
        return Document(id=p["document_id"], dataset_id=p["dataset_id"], name=p["name"], mime_type=p.get("mime_type") or "",
                        size=int(p.get("size") or 0), status=DocStatus(int(p["status"])), error=p.get("error") or "",
                        chunk_count=int(p.get("chunk_count") or 0), metadata=json.loads(p.get("metadata_json") or "{}"),
                        created_at=float(p["created_at"]), updated_at=float(p["updated_at"]),
                        disabled=bool(p.get("disabled")), settings=p.get("settings") or "")

    async def get_documents(self, tenant_id: str, dataset_ids: Sequence[str], document_ids: Sequence[str] | None = None) -> list[Document]:
        from weaviate.classes.query import Filter

        if not dataset_ids or (document_ids is not None and not document_ids):
            return []
        where = Filter.by_property("dataset_id").contains_any(list(dataset_ids))
        if document_ids is not None:
            where = where & Filter.by_property("document_id").contains_any(list(document_ids))
        out: list[Document] = []
        async for obj in self._iterate((await self._catalog(DOCUMENTS, tenant_id)), where):
            out.append(self._document(obj.properties))
        return out

    async def list_documents(self, tenant_id: str, dataset_id: str, *, offset: int, limit: int) -> tuple[list[Document], int]:
        from weaviate.classes.query import Filter, Sort

        coll = await self._catalog(DOCUMENTS, tenant_id)
        where = Filter.by_property("dataset_id").equal(dataset_id)
        total = (await coll.aggregate.over_all(filters=where, total_count=True)).total_count or 0
        res = await coll.query.fetch_objects(filters=where, limit=limit, offset=offset,
                                             sort=Sort.by_property("created_at", ascending=False))
        return [self._document(o.properties) for o in res.objects], int(total)

    async def delete_document(self, tenant_id: str, dataset_id: str, document_id: str) -> bool:
        from weaviate.classes.query import Filter

        coll = await self._catalog(DOCUMENTS, tenant_id)
        obj = await coll.query.fetch_object_by_id(_uuid(document_id))
        if obj is None or obj.properties.get("dataset_id") != dataset_id:
            return False
        chunks = self._client.collections.use(chunks_collection(dataset_id))
        await chunks.data.delete_many(where=Filter.by_property("document_id").equal(document_id))
        await (await self._catalog(FILES, tenant_id)).data.delete_by_id(_uuid(document_id))
        await coll.data.delete_by_id(_uuid(document_id))
        return True

    async def put_file(self, tenant_id: str, dataset_id: str, document_id: str, content: bytes) -> None:
        from weaviate.classes.data import DataObject

        doc = await (await self._catalog(DOCUMENTS, tenant_id)).query.fetch_object_by_id(_uuid(document_id))
        if doc is None or doc.properties.get("dataset_id") != dataset_id:
            return
        props = {"document_id": document_id, "dataset_id": dataset_id, "file": base64.b64encode(content).decode()}
        res = await (await self._catalog(FILES, tenant_id)).data.insert_many([DataObject(properties=props, uuid=_uuid(document_id))])
        _check_batch(res, "storing a document's file")

    async def get_file(self, tenant_id: str, dataset_id: str, document_id: str) -> bytes | None:
        coll = await self._catalog(FILES, tenant_id)
        obj = await coll.query.fetch_object_by_id(_uuid(document_id), return_properties=["dataset_id", "file"])
        if obj is None or obj.properties.get("dataset_id") != dataset_id or not obj.properties.get("file"):
            return None
        return base64.b64decode(obj.properties["file"])

    # ------------------------------------------------------------------------------------ chunks
    async def replace_chunks(self, tenant_id: str, dataset: Dataset, doc: Document, chunks: Sequence[ChunkRecord]) -> None:
        from weaviate.classes.data import DataObject
        from weaviate.classes.query import Filter

        coll = self._client.collections.use(chunks_collection(dataset.id))
        new_ids = {_uuid(c.id) for c in chunks}
        stale = [str(o.uuid) async for o in self._iterate(coll, Filter.by_property("document_id").equal(doc.id), props=[])
                 if str(o.uuid) not in new_ids]
        for start in range(0, len(chunks), _PAGE):
            batch = [DataObject(uuid=_uuid(c.id), vector=[float(x) for x in c.vector], properties={
                "chunk_id": c.id, "document_id": doc.id, "content": c.content, "positions": list(c.positions),
                "keywords": scoring.keyword_text(c.extra) if c.extra else "",
                "extra": json.dumps(c.extra, ensure_ascii=False) if c.extra else ""})
                for c in chunks[start : start + _PAGE]]
            _check_batch(await coll.data.insert_many(batch), "storing chunks")
        for start in range(0, len(stale), _PAGE):
            await coll.data.delete_many(where=Filter.by_id().contains_any(stale[start : start + _PAGE]))
        await self.put_document(tenant_id, doc)

    async def get_chunks(self, tenant_id: str, dataset_id: str, document_id: str) -> list[ChunkRecord]:
        from weaviate.classes.query import Filter

        if await self.get_dataset(tenant_id, dataset_id) is None:
            return []
        coll = self._client.collections.use(chunks_collection(dataset_id))
        where = Filter.by_property("document_id").equal(document_id)
        out = []
        offset = 0
        while True:
            res = await coll.query.fetch_objects(filters=where, limit=_PAGE, offset=offset, include_vector=True)
            for o in res.objects:
                vector = o.vector.get("default") if isinstance(o.vector, dict) else o.vector
                extra = o.properties.get("extra") or ""
                out.append(ChunkRecord(o.properties["chunk_id"], o.properties["content"], list(vector or []),
                                       [int(x) for x in o.properties.get("positions") or []],
                                       json.loads(extra) if extra else {}))
            if len(res.objects) < _PAGE:
                return out
            offset += _PAGE

    async def candidates(self, query: CandidateQuery) -> CandidateSet:
        from weaviate.classes.query import Filter, HybridFusion, MetadataQuery

        weights = {t: 1.0 for t in query.terms}  # Weaviate exposes no document frequencies
        if query.document_ids is not None and not query.document_ids:
            return CandidateSet([], weights)
        where = Filter.by_property("document_id").contains_any(sorted(query.document_ids)) if query.document_ids else None
        text = " ".join(query.terms) if query.keyword else ""
        out: list[Candidate] = []
        for ds in query.datasets:
            await self._ensure_chunks(ds.id)
            coll = self._client.collections.use(chunks_collection(ds.id))
            vec = query.vectors.get(ds.id)
            common = dict(limit=query.limit, filters=where, include_vector=vec is not None,
                          return_metadata=MetadataQuery(score=True))
            if vec is not None and text:
                res = await coll.query.hybrid(query=text, vector=vec, alpha=query.alpha, query_properties=_SEARCHED,
                                              fusion_type=HybridFusion.RELATIVE_SCORE, **common)
            elif vec is not None:
                res = await coll.query.near_vector(near_vector=vec, **common)
            elif text:
                res = await coll.query.bm25(query=text, query_properties=_SEARCHED, **common)
            else:
                continue
            qv = np.asarray(vec, dtype=np.float32) if vec is not None else None
            for o in res.objects:
                p = o.properties
                sim = None
                if qv is not None:
                    stored = o.vector.get("default") if isinstance(o.vector, dict) else o.vector
                    sim = float(np.asarray(stored, dtype=np.float32) @ qv) if stored is not None and len(stored) == len(qv) else 0.0
                score = o.metadata.score if o.metadata is not None and o.metadata.score is not None else 0.0
                extra = p.get("extra") or ""
                out.append(Candidate(p["chunk_id"], p["content"], p["document_id"], ds.id, sim, float(score),
                                     [int(x) for x in p.get("positions") or []], json.loads(extra) if extra else {}))
        doc_ids = sorted({c.document_id for c in out})
        disabled = {d.id for d in await self.get_documents(query.tenant_id, [ds.id for ds in query.datasets], doc_ids)
                    if d.disabled} if doc_ids else set()
        for c in out:
            c.document_disabled = c.document_id in disabled
        return CandidateSet(out, weights)

    # ------------------------------------------------------------------------------------ helpers
    @staticmethod
    async def _iterate(coll: Any, where: Any, props: list[str] | None = None):
        offset = 0
        while True:
            kwargs = {"return_properties": props} if props is not None else {}
            res = await coll.query.fetch_objects(filters=where, limit=_PAGE, offset=offset, **kwargs)
            for o in res.objects:
                yield o
            if len(res.objects) < _PAGE:
                return
            offset += _PAGE


async def _add_missing(coll: Any, props: list[Any]) -> None:
    have = {p.name for p in (await coll.config.get()).properties}
    for prop in props:
        if prop.name not in have:
            await coll.config.add_property(prop)


def _check_batch(res: Any, what: str) -> None:
    errors = getattr(res, "errors", None)
    if errors:
        first = next(iter(errors.values()))
        raise ServiceError(f"Weaviate failed {what}: {getattr(first, 'message', first)}")
