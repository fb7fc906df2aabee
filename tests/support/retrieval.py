"""A real retrieval service in this process on 127.0.0.1:0 over each storage backend, and the llm_gateway its
embeddings come from (scripted models). The one way the tests start a retrieval service:

    async with embedding_gateway() as llm_addr, running_stack("sqlite", tmp_path, llm_addr) as kb:
        ds = await kb.dataset("handbook"); await kb.ingest(ds.id, "a.md", "...")
"""

from __future__ import annotations

import os
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import grpc
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services.clients import RetrievalClient
from services.common.server import Service
from services.common.testing import start_service, stop_service
from services.retrieval.app import build
from services.retrieval.config import RetrievalConfig
from tests.support.llm_gateway import llm_gateway

# bow@Scripted: bag-of-words hashing vectors, so "vector similarity" is word overlap, deterministic and fast.
SCRIPTS = {
    "embedding": {"bow": {"dimension": 256}, "tiny": {"dimension": 8}},
    "rerank": {"overlap": {}},
}
EMBED = "bow@Scripted"
BACKENDS = ["sqlite", "sqlite-vec", "weaviate"]
WEAVIATE_URL = os.environ.get("TRELLIS_WEAVIATE_URL", "")
NO_WEAVIATE = ("Weaviate contract run NOT executed: TRELLIS_WEAVIATE_URL is not set "
               "(set it to a Weaviate server, e.g. http://localhost:8080, to run the suite against it)")


@asynccontextmanager
async def embedding_gateway(**cfg_overrides: Any) -> AsyncIterator[str]:
    """A real llm_gateway serving SCRIPTS' embedding and rerank models: its address."""
    async with llm_gateway(SCRIPTS, **cfg_overrides) as llm:
        yield llm.addr


def config_for(kind: str, data: Path, llm_addr: str, **overrides: Any) -> RetrievalConfig:
    if kind == "sqlite-vec":  # no in-memory index: every vector search goes through sqlite-vec's vec0
        overrides.setdefault("vector_cache_mb", 0)
    if kind == "weaviate":
        overrides.setdefault("weaviate_url", WEAVIATE_URL)
    return RetrievalConfig.for_tests(data, llm_addr, **overrides)


@dataclass
class Stack:
    """A running retrieval service; `restart()` stops it and starts a new one on the same storage."""

    cfg: RetrievalConfig
    service: Service | None = None
    server: grpc.aio.Server | None = None
    channel: grpc.aio.Channel | None = None
    stub: rr_grpc.RetrievalServiceStub = field(init=False)
    client: RetrievalClient = field(init=False)  # what components get (`Services(retrieval=stack.client)`)
    tenant: str = field(default_factory=lambda: "tenant-" + uuid.uuid4().hex[:8])
    port: int = 0

    async def start(self, port: int = 0) -> None:
        """Build and start the service on `port` (0: a free one; a stopped stack's port: the same address)."""
        self.service = build(self.cfg)
        self.server, self.port = await start_service(self.service, "retrieval", port=port)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = rr_grpc.RetrievalServiceStub(self.channel)
        self.client = RetrievalClient(self.channel)

    async def stop(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        if self.service is not None:
            await stop_service(self.server, self.service)
        self.channel = self.server = self.service = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    # -- shortcuts (all with the stack's tenant unless told otherwise)
    async def dataset(self, name: str = "kb", *, tenant: str = "", model: str = EMBED, size: int = 0, overlap: int = 0) -> rr_pb.Dataset:
        req = rr_pb.CreateDatasetRequest(tenant_id=tenant or self.tenant, name=name, embedding_model=model,
                                         chunk_size=size, chunk_overlap=overlap)
        return (await self.stub.CreateDataset(req, timeout=30)).dataset

    async def ingest(self, dataset_id: str, name: str, content: bytes | str, *, tenant: str = "", document_id: str = "",
                     mime: str = "", metadata: str = "") -> rr_pb.Document:
        data = content.encode() if isinstance(content, str) else content
        req = rr_pb.IngestDocumentRequest(tenant_id=tenant or self.tenant, dataset_id=dataset_id, document_id=document_id,
                                          name=name, mime_type=mime, content=data, metadata_json=metadata)
        return (await self.stub.IngestDocument(req, timeout=60)).document

    async def search(self, query: str, dataset_ids: list[str], *, tenant: str = "", **kw: Any) -> rr_pb.SearchResponse:
        kw.setdefault("keywords_similarity_weight", 0.5)
        kw.setdefault("similarity_threshold", 0.0)
        req = rr_pb.SearchRequest(tenant_id=tenant or self.tenant, query=query, dataset_ids=dataset_ids, **kw)
        return await self.stub.Search(req, timeout=30)


@asynccontextmanager
async def running_stack(kind: str, data: Path, llm_addr: str, **overrides: Any) -> AsyncIterator[Stack]:
    stack = Stack(config_for(kind, data, llm_addr, **overrides))
    await stack.start()
    try:
        yield stack
    finally:
        await stack.stop()
