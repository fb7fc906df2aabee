"""Helpers for the retrieval tests: a real llm_gateway (scripted models) and a real retrieval server on port 0."""

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

from services.common.server import Service
from services.common.testing import start_server, start_service, stop_service
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.server import LlmServicer
from services.retrieval.app import build
from services.retrieval.config import RetrievalConfig

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
async def llm_gateway(**cfg_overrides: Any) -> AsyncIterator[str]:
    gateway = LlmGateway.create(LlmGatewayConfig.for_tests(**cfg_overrides), scripts=SCRIPTS)
    server, port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
        await gateway.aclose()


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
    tenant: str = field(default_factory=lambda: "tenant-" + uuid.uuid4().hex[:8])
    port: int = 0

    async def start(self) -> None:
        self.service = build(self.cfg)
        self.server, self.port = await start_service(self.service, "retrieval")
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = rr_grpc.RetrievalServiceStub(self.channel)

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


def make_pdf(pages: list[str]) -> bytes:
    """A small valid PDF with one text line per line of each page (Helvetica), for the PDF parser tests."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    n = len(pages)
    page_ids = [4 + 2 * i for i in range(n)]
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            ("<< /Type /Pages /Kids [" + " ".join(f"{p} 0 R" for p in page_ids) + f"] /Count {n} >>").encode(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        stream = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({esc(line)}) Tj T*" for line in text.split("\n")) + " ET"
        objs.append((f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                     f"/Contents {page_ids[i] + 1} 0 R >>").encode())
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream".encode())
    out = b"%PDF-1.4\n"
    offsets = []
    for i, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out
