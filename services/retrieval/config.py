"""Retrieval service settings, read once at start-up (STYLE.md section 4)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from services.common.config import DEFAULT_PORTS, ServerConfig, data_dir, env_float, env_int, env_str, peer_address


@dataclass(frozen=True)
class RetrievalConfig:
    server: ServerConfig  # TRELLIS_RETRIEVAL_PORT (50053), TRELLIS_RETRIEVAL_METRICS_PORT (9093)
    llm_gateway_addr: str  # TRELLIS_LLM_GATEWAY_ADDR: where embeddings and rerank come from
    data_dir: Path  # TRELLIS_DATA_DIR: the embedded backend keeps retrieval.sqlite3 here (default ./.trellis)
    weaviate_url: str  # TRELLIS_WEAVIATE_URL: when set, the Weaviate backend replaces the embedded one
    weaviate_api_key: str  # TRELLIS_WEAVIATE_API_KEY: optional API key for that Weaviate
    weaviate_grpc_port: int  # TRELLIS_WEAVIATE_GRPC_PORT: Weaviate's gRPC port (default 50051)
    # TRELLIS_RETRIEVAL_CHUNK_SIZE: tokens (words and punctuation) per chunk when a dataset sets none (default
    # 192, so a chunk stays inside the 256 word pieces all-MiniLM-L6-v2 embeds: longer chunks lose their tail)
    chunk_size: int
    chunk_overlap: int  # TRELLIS_RETRIEVAL_CHUNK_OVERLAP: tokens repeated between neighbours (default 32)
    embed_batch: int  # TRELLIS_RETRIEVAL_EMBED_BATCH: texts per Embed call (default 32)
    embed_concurrency: int  # TRELLIS_RETRIEVAL_EMBED_CONCURRENCY: Embed calls in flight per document (default 2)
    llm_timeout_s: float  # TRELLIS_RETRIEVAL_LLM_TIMEOUT_S: budget of one Embed or Rerank call (default 120)
    max_document_mb: float  # TRELLIS_RETRIEVAL_MAX_DOCUMENT_MB: larger uploads are refused (default 64)
    max_candidates: int  # TRELLIS_RETRIEVAL_MAX_CANDIDATES: keyword and vector candidates per search (cap on top_k unless top_n is larger, default 64)
    vector_cache_mb: int  # TRELLIS_RETRIEVAL_VECTOR_CACHE_MB: RAM for in-memory vector indexes; 0: sqlite-vec scans only (default 1024)
    rerank_limit: int  # TRELLIS_RETRIEVAL_RERANK_LIMIT: best candidates sent to a rerank model (default 64)

    @classmethod
    def from_env(cls) -> "RetrievalConfig":
        port, metrics_port = DEFAULT_PORTS["retrieval"]
        return cls(
            server=ServerConfig.from_env("retrieval", port, metrics_port),
            llm_gateway_addr=peer_address("llm_gateway"),
            data_dir=data_dir(),
            weaviate_url=env_str("TRELLIS_WEAVIATE_URL", ""),
            weaviate_api_key=env_str("TRELLIS_WEAVIATE_API_KEY", ""),
            weaviate_grpc_port=env_int("TRELLIS_WEAVIATE_GRPC_PORT", 50051),
            chunk_size=env_int("TRELLIS_RETRIEVAL_CHUNK_SIZE", 192),
            chunk_overlap=env_int("TRELLIS_RETRIEVAL_CHUNK_OVERLAP", 32),
            embed_batch=max(1, env_int("TRELLIS_RETRIEVAL_EMBED_BATCH", 32)),
            embed_concurrency=max(1, env_int("TRELLIS_RETRIEVAL_EMBED_CONCURRENCY", 2)),
            llm_timeout_s=env_float("TRELLIS_RETRIEVAL_LLM_TIMEOUT_S", 120.0),
            max_document_mb=env_float("TRELLIS_RETRIEVAL_MAX_DOCUMENT_MB", 64.0),
            max_candidates=max(1, env_int("TRELLIS_RETRIEVAL_MAX_CANDIDATES", 64)),
            vector_cache_mb=max(0, env_int("TRELLIS_RETRIEVAL_VECTOR_CACHE_MB", 1024)),
            rerank_limit=max(1, env_int("TRELLIS_RETRIEVAL_RERANK_LIMIT", 64)),
        )

    @classmethod
    def for_tests(cls, data: Path, llm_gateway_addr: str, **overrides: object) -> "RetrievalConfig":
        """Defaults with no environment read; override what a test needs."""
        cfg = cls(
            server=ServerConfig("retrieval", "127.0.0.1", 0, 0, 1.0, 0.0),
            llm_gateway_addr=llm_gateway_addr,
            data_dir=data,
            weaviate_url="",
            weaviate_api_key="",
            weaviate_grpc_port=50051,
            chunk_size=192,
            chunk_overlap=32,
            embed_batch=32,
            embed_concurrency=2,
            llm_timeout_s=30.0,
            max_document_mb=64.0,
            max_candidates=64,
            vector_cache_mb=1024,
            rerank_limit=64,
        )
        return replace(cfg, **overrides)  # type: ignore[arg-type]
