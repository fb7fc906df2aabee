#!/usr/bin/env python3
"""Retrieval service: hybrid query latency over 100,000 chunks, and ingest throughput, with floors.

The services run as in production: `python -m services.llm_gateway` and `python -m services.retrieval`
(embedded SQLite backend) as subprocesses on their own ports, queried through gRPC stubs from this process.

- Query: 100,000 chunks of ~100 words from a Zipf vocabulary. Their vectors are synthetic: the bag-of-words
  hashing vectors of llm_gateway's scripted `bow` model (dimension 384), computed here in numpy, because
  embedding 100k chunks with the local model would take hours on 2 cores. Queries go through Search as a
  client sends them, embedded by llm_gateway with the same model, so the vector side is consistent.
  Latency is client-side (gRPC round trip included) for hybrid (weight 0.5), keyword-only and vector-only
  searches with RAGFlow's defaults (top_n 8, top_k 1024, threshold 0.2); plus the sqlite-vec-only path
  (no in-memory index) for comparison. Floors: a bare Embed RPC for the query, and the numpy product over
  the 100k x 384 matrix.
- Ingest: IngestDocument of a Markdown document with the local embedder (all-MiniLM-L6-v2 on the CPU), in
  chunks/s; floor: the same chunk texts through a bare Embed RPC (the embedder's own speed), and the same
  document with the scripted embedder (the pipeline without model cost).

Usage: python bench/retrieval_bench.py [--chunks N] [--queries N]   -> bench/results/retrieval.json
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from trellis.llm.v1 import llm_service_pb2 as llm_pb  # noqa: E402
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc  # noqa: E402
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb  # noqa: E402
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc  # noqa: E402

from services.retrieval.chunking import chunk_blocks  # noqa: E402
from services.retrieval.backends.sqlite import SqliteBackend  # noqa: E402
from services.retrieval.ingest import chunk_id  # noqa: E402
from services.retrieval.models import ChunkRecord, Dataset, DocStatus, Document, new_id  # noqa: E402
from services.retrieval.parsing import parse  # noqa: E402

DIM = 384
VOCAB = 30_000
WORDS_PER_CHUNK = 100
CHUNKS_PER_DOC = 100
TENANT = "bench"
perf = time.perf_counter


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    pick = lambda q: ms[min(len(ms) - 1, int(round(q * (len(ms) - 1))))]  # noqa: E731
    return {"n": len(ms), "p50_ms": round(pick(0.5), 2), "p90_ms": round(pick(0.9), 2), "p99_ms": round(pick(0.99), 2),
            "max_ms": round(ms[-1], 2), "mean_ms": round(statistics.fmean(ms), 2)}


def vocabulary(rng: np.random.Generator) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "da", "zu", "ri", "an", "el", "or", "um", "ba", "qi"]
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        words["".join(rng.choice(syllables, int(rng.integers(2, 5))))] = None
    return list(words)


def bow_table(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per word: the index and sign the scripted `bow` model gives it (services/llm_gateway/providers/scripted.py)."""
    idx = np.zeros(len(words), dtype=np.int64)
    sign = np.zeros(len(words), dtype=np.float32)
    for i, w in enumerate(words):
        h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
        idx[i], sign[i] = h % DIM, 1.0 if (h >> 32) & 1 else -1.0
    return idx, sign


async def build_corpus(backend, dataset, n_chunks: int, rng: np.random.Generator, words: list[str]) -> float:
    """Writes n_chunks through the backend (bypassing embedding) and returns chunks/s of the load."""
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.07
    p /= p.sum()
    idx, sign = bow_table(words)
    start = perf()
    for d in range(0, n_chunks, CHUNKS_PER_DOC):
        count = min(CHUNKS_PER_DOC, n_chunks - d)
        ids = rng.choice(VOCAB, size=(count, WORDS_PER_CHUNK), p=p)
        vecs = np.zeros((count, DIM), dtype=np.float32)
        for r in range(count):
            np.add.at(vecs[r], idx[ids[r]], sign[ids[r]])
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        doc = Document(new_id(), dataset.id, f"doc-{d // CHUNKS_PER_DOC}.txt", "text/plain", 0, DocStatus.DONE,
                       chunk_count=count, metadata={"batch": d // CHUNKS_PER_DOC})
        texts = [" ".join(words[j] for j in row) + "." for row in ids]
        chunks = [ChunkRecord(chunk_id(doc.id, i, t), t, vecs[i], []) for i, t in enumerate(texts)]
        await backend.put_document(TENANT, doc)
        await backend.replace_chunks(TENANT, dataset, doc, chunks)
    return n_chunks / (perf() - start)


def queries(rng: np.random.Generator, words: list[str], n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = int(rng.integers(3, 6))
        picked = [words[int(i)] for i in rng.integers(30, 5000, k)]
        out.append("what is the " + " ".join(picked))
    return out


async def time_searches(stub, ds_ids: list[str], texts: list[str], weight: float) -> tuple[list[float], int]:
    samples, hits = [], 0
    for q in texts:
        t = perf()
        resp = await stub.Search(rr_pb.SearchRequest(tenant_id=TENANT, query=q, dataset_ids=ds_ids, top_n=8, top_k=1024,
                                                     similarity_threshold=0.2, keywords_similarity_weight=weight), timeout=60)
        samples.append(perf() - t)
        hits += len(resp.chunks)
    return samples, hits


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    """`python -m services.<name>` on a free port, stopped with SIGTERM."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name, self.port = name, free_port()
        key = name.upper()
        full = {**os.environ, **env, f"TRELLIS_{key}_PORT": str(self.port), f"TRELLIS_{key}_METRICS_PORT": "0",
                "TRELLIS_DRAIN_S": "0"}
        self.log = open(log_dir / f"{name}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", f"services.{name}"], cwd=ROOT, env=full,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        self.addr = f"127.0.0.1:{self.port}"

    async def ready(self, timeout_s: float = 120.0) -> None:
        deadline = perf() + timeout_s
        async with grpc.aio.insecure_channel(self.addr) as ch:
            while perf() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
                try:
                    resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
        raise SystemExit(f"{self.name} did not become ready in {timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


async def retrieval_service(data: Path, llm_addr: str, log_dir: Path, **env: str) -> tuple[Service, grpc.aio.Channel]:
    svc = Service("retrieval", {"TRELLIS_DATA_DIR": str(data), "TRELLIS_LLM_GATEWAY_ADDR": llm_addr, **env}, log_dir)
    await svc.ready()
    return svc, grpc.aio.insecure_channel(svc.addr)


async def query_bench(llm_addr: str, llm_stub, work: Path, n_chunks: int, n_queries: int) -> dict:
    rng = np.random.default_rng(7)
    words = vocabulary(rng)
    data = work / "query-data"
    backend = SqliteBackend(data)  # the corpus is written directly, then served by the subprocess
    await backend.open()
    dataset = Dataset(new_id(), TENANT, "bench", embedding_model="bow@Scripted", dimension=DIM)
    await backend.create_dataset(dataset)
    await backend.set_embedding(TENANT, dataset.id, "bow@Scripted", DIM)
    load_rate = await build_corpus(backend, dataset, n_chunks, rng, words)
    await backend.aclose()
    matrix = load_matrix(data / "retrieval.sqlite3", n_chunks)

    svc, channel = await retrieval_service(data, llm_addr, work)
    stub = rr_grpc.RetrievalServiceStub(channel)
    qs = queries(rng, words, n_queries + 20)
    t = perf()
    await time_searches(stub, [dataset.id], qs[:1], 0.5)  # the first vector search loads the in-memory index
    first_query_s = perf() - t
    await time_searches(stub, [dataset.id], qs[1:20], 0.5)  # warm caches
    hybrid, hybrid_hits = await time_searches(stub, [dataset.id], qs[20:], 0.5)
    keyword, _ = await time_searches(stub, [dataset.id], qs[20:20 + n_queries // 2], 1.0)
    vector, _ = await time_searches(stub, [dataset.id], qs[20:20 + n_queries // 2], 0.0)
    await channel.close()
    svc.stop()
    embed = []
    for q in qs[20:20 + n_queries // 2]:
        t = perf()
        await llm_stub.Embed(llm_pb.EmbedRequest(model_id="bow@Scripted", texts=[q]), timeout=30)
        embed.append(perf() - t)
    matvec = []
    for q in matrix[:50]:
        t = perf()
        scores = matrix @ q
        np.argpartition(scores, len(scores) - 128)
        matvec.append(perf() - t)
    # The same database without the in-memory index: every vector search is a sqlite-vec vec0 scan.
    svc, channel = await retrieval_service(data, llm_addr, work, TRELLIS_RETRIEVAL_VECTOR_CACHE_MB="0")
    n_vec = max(10, n_queries // 10)
    sqlite_vec, _ = await time_searches(rr_grpc.RetrievalServiceStub(channel), [dataset.id], qs[20:20 + n_vec], 0.5)
    await channel.close()
    svc.stop()
    db_mb = sum(f.stat().st_size for f in data.iterdir()) / 1e6
    h = percentiles(hybrid)
    return {
        "chunks": n_chunks, "dimension": DIM, "words_per_chunk": WORDS_PER_CHUNK,
        "vectors": "synthetic: bag-of-words hashing vectors of llm_gateway's scripted `bow` model, computed in numpy "
                   "(embedding 100k chunks with the local model would take hours); queries embedded by llm_gateway",
        "bulk_load_chunks_per_s": round(load_rate, 1), "database_mb": round(db_mb, 1),
        "first_query_ms_incl_index_load": round(first_query_s * 1000, 1),
        "hybrid_w0.5": h, "keyword_only": percentiles(keyword), "vector_only": percentiles(vector),
        "hybrid_sqlite_vec_only": percentiles(sqlite_vec),
        "avg_hits_per_hybrid_query": round(hybrid_hits / max(1, len(hybrid)), 2),
        "floor_embed_rpc": percentiles(embed), "floor_numpy_matvec_top128": percentiles(matvec),
        "target_p99_ms": 50, "meets_target": h["p99_ms"] < 50,
    }


def load_matrix(db: Path, n: int) -> np.ndarray:
    import sqlite3

    with closing(sqlite3.connect(db)) as conn:
        blobs = [r[0] for r in conn.execute("SELECT vector FROM chunks")]
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), DIM)


def markdown_document(n_sections: int) -> str:
    rng = np.random.default_rng(3)
    common = ("the retrieval service splits documents into chunks and embeds them so that a canvas can answer "
              "questions about policies products and procedures with citations to the source").split()
    parts = []
    for s in range(n_sections):
        parts.append(f"## Section {s}\n")
        sentences = [" ".join(rng.choice(common, 12)).capitalize() + "." for _ in range(4)]
        parts.append(" ".join(sentences) + "\n")
    return "\n".join(parts)


async def ingest_once(stub, model: str, text: str, name: str) -> tuple[float, int]:
    ds = (await stub.CreateDataset(rr_pb.CreateDatasetRequest(tenant_id=TENANT, name=name, embedding_model=model,
                                                              chunk_size=128, chunk_overlap=16))).dataset
    t = perf()
    doc = (await stub.IngestDocument(rr_pb.IngestDocumentRequest(tenant_id=TENANT, dataset_id=ds.id, name="doc.md",
                                                                 content=text.encode()), timeout=3600)).document
    elapsed = perf() - t
    if doc.status != rr_pb.DOCUMENT_STATUS_DONE:
        raise SystemExit(f"bench ingest failed: {doc.error}")
    return elapsed, doc.chunk_count


async def ingest_bench(llm_addr: str, llm_stub, work: Path, sections: int) -> dict:
    text = markdown_document(sections)
    svc, channel = await retrieval_service(work / "ingest-data", llm_addr, work)
    stub = rr_grpc.RetrievalServiceStub(channel)
    await llm_stub.Embed(llm_pb.EmbedRequest(model_id="all-MiniLM-L6-v2@Local", texts=["warm up"]), timeout=300)
    local_s, chunks = await ingest_once(stub, "all-MiniLM-L6-v2@Local", text, "local")
    scripted_s, _ = await ingest_once(stub, "bow@Scripted", text, "scripted")
    await channel.close()
    svc.stop()
    pieces = [p.text for p in chunk_blocks(parse("doc.md", "", text.encode()), size=128, overlap=16)]
    t = perf()
    for i in range(0, len(pieces), 32):
        await llm_stub.Embed(llm_pb.EmbedRequest(model_id="all-MiniLM-L6-v2@Local", texts=pieces[i:i + 32]), timeout=600)
    embed_s = perf() - t
    local_rate = chunks / local_s
    floor = len(pieces) / embed_s if pieces else 0.0
    return {
        "document_chunks": chunks, "chunk_size_tokens": 128,
        "local_embedder_chunks_per_s": round(local_rate, 1),
        "floor_local_embed_rpc_chunks_per_s": round(floor, 1),
        "ratio_ingest_to_embed_floor": round(local_rate / floor, 3) if floor else None,
        "scripted_embedder_chunks_per_s": round(chunks / scripted_s, 1),
        "target_chunks_per_s": 200, "meets_target": local_rate >= 200,
        "note": "the local embedder (numpy BERT on 2 shared cores) bounds ingest: the ratio to the bare Embed "
                "floor is the pipeline's overhead, and the scripted-embedder rate is the pipeline without model cost",
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--sections", type=int, default=48)
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="retrieval-bench-") as tmp:
        work = Path(tmp)
        scripts = work / "scripts.json"
        scripts.write_text(json.dumps({"embedding": {"bow": {"dimension": DIM}}}))
        llm = Service("llm_gateway", {"TRELLIS_LLM_SCRIPTS": str(scripts), "TRELLIS_LLM_LOCAL": "1",
                                      "TRELLIS_LLM_LOCAL_QUEUE": "64"}, work)
        try:
            await llm.ready()
            async with grpc.aio.insecure_channel(llm.addr) as channel:
                llm_stub = llm_grpc.LlmServiceStub(channel)
                query = await query_bench(llm.addr, llm_stub, work, args.chunks, args.queries)
                ingest = await ingest_bench(llm.addr, llm_stub, work, args.sections)
        finally:
            llm.stop()
    result = {
        "summary": {"hybrid_p50_ms": query["hybrid_w0.5"]["p50_ms"], "hybrid_p99_ms": query["hybrid_w0.5"]["p99_ms"],
                    "chunks": query["chunks"], "p99_target_ms": 50, "p99_meets_target": query["meets_target"],
                    "ingest_local_chunks_per_s": ingest["local_embedder_chunks_per_s"],
                    "ingest_target_chunks_per_s": 200, "ingest_meets_target": ingest["meets_target"]},
        "query": query, "ingest": ingest,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    # 1-minute load average before and after: other work on a shared 2-core machine shows in p99
                    "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]},
    }
    out = ROOT / "bench" / "results" / "retrieval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"]))


if __name__ == "__main__":
    asyncio.run(main())
