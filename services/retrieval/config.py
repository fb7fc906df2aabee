"""Retrieval service settings, read once at start-up (docs/adding-a-service.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.common.config import ServerConfig, data_dir, env_float, env_int, env_str, peer_address


@dataclass(frozen=True)
class RetrievalConfig:
    server: ServerConfig  # TRELLIS_RETRIEVAL_PORT (50053), TRELLIS_RETRIEVAL_METRICS_PORT (9093)
    llm_gateway_addr: str  # TRELLIS_LLM_GATEWAY_ADDR: where embeddings and rerank come from (peer_address)
    data_dir: Path  # TRELLIS_DATA_DIR: the embedded backend keeps retrieval.sqlite3 here (default ./.trellis)
    weaviate_url: str = ""  # TRELLIS_WEAVIATE_URL: when set, the Weaviate backend replaces the embedded one
    weaviate_api_key: str = ""  # TRELLIS_WEAVIATE_API_KEY: optional API key for that Weaviate
    weaviate_grpc_port: int = 50051  # TRELLIS_WEAVIATE_GRPC_PORT: Weaviate's gRPC port
    # TRELLIS_RETRIEVAL_CHUNK_SIZE: tokens (words and punctuation) per chunk when a dataset sets none (192, so a
    # chunk stays inside the 256 word pieces all-MiniLM-L6-v2 embeds: longer chunks lose their tail)
    chunk_size: int = 192
    chunk_overlap: int = 32  # TRELLIS_RETRIEVAL_CHUNK_OVERLAP: tokens repeated between neighbours
    embed_batch: int = 32  # TRELLIS_RETRIEVAL_EMBED_BATCH: texts per Embed call
    embed_concurrency: int = 2  # TRELLIS_RETRIEVAL_EMBED_CONCURRENCY: Embed calls in flight per document
    llm_timeout_s: float = 120.0  # TRELLIS_RETRIEVAL_LLM_TIMEOUT_S: budget of one Embed or Rerank call
    max_document_mb: float = 64.0  # TRELLIS_RETRIEVAL_MAX_DOCUMENT_MB: larger uploads are refused
    # TRELLIS_RETRIEVAL_MAX_CANDIDATES: keyword and vector candidates per search (cap on top_k unless top_n is larger)
    max_candidates: int = 64
    # TRELLIS_RETRIEVAL_VECTOR_CACHE_MB: RAM for in-memory vector indexes; 0: sqlite-vec scans only
    vector_cache_mb: int = 1024
    rerank_limit: int = 64  # TRELLIS_RETRIEVAL_RERANK_LIMIT: best candidates sent to a rerank model

    @classmethod
    def from_env(cls) -> "RetrievalConfig":
        return cls(
            server=ServerConfig.from_env("retrieval"),
            llm_gateway_addr=peer_address("llm_gateway"),
            data_dir=data_dir(),
            weaviate_url=env_str("TRELLIS_WEAVIATE_URL", cls.weaviate_url),
            weaviate_api_key=env_str("TRELLIS_WEAVIATE_API_KEY", cls.weaviate_api_key),
            weaviate_grpc_port=env_int("TRELLIS_WEAVIATE_GRPC_PORT", cls.weaviate_grpc_port),
            chunk_size=env_int("TRELLIS_RETRIEVAL_CHUNK_SIZE", cls.chunk_size),
            chunk_overlap=env_int("TRELLIS_RETRIEVAL_CHUNK_OVERLAP", cls.chunk_overlap),
            embed_batch=max(1, env_int("TRELLIS_RETRIEVAL_EMBED_BATCH", cls.embed_batch)),
            embed_concurrency=max(1, env_int("TRELLIS_RETRIEVAL_EMBED_CONCURRENCY", cls.embed_concurrency)),
            llm_timeout_s=env_float("TRELLIS_RETRIEVAL_LLM_TIMEOUT_S", cls.llm_timeout_s),
            max_document_mb=env_float("TRELLIS_RETRIEVAL_MAX_DOCUMENT_MB", cls.max_document_mb),
            max_candidates=max(1, env_int("TRELLIS_RETRIEVAL_MAX_CANDIDATES", cls.max_candidates)),
            vector_cache_mb=max(0, env_int("TRELLIS_RETRIEVAL_VECTOR_CACHE_MB", cls.vector_cache_mb)),
            rerank_limit=max(1, env_int("TRELLIS_RETRIEVAL_RERANK_LIMIT", cls.rerank_limit)),
        )

    @classmethod
    def for_tests(cls, data: Path, llm_gateway_addr: str, **overrides: object) -> "RetrievalConfig":
        """The field defaults with no environment read and a shorter LLM budget; override what a test needs."""
        values: dict[str, object] = dict(server=ServerConfig.for_tests("retrieval"), llm_gateway_addr=llm_gateway_addr,
                                         data_dir=data, llm_timeout_s=30.0)
        return cls(**{**values, **overrides})  # type: ignore[arg-type]
