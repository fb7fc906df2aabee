"""Storage backends behind one interface (`base.Backend`): embedded SQLite by default, Weaviate when configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.retrieval.backends.base import Backend

if TYPE_CHECKING:
    from services.retrieval.config import RetrievalConfig


def open_backend(cfg: "RetrievalConfig") -> Backend:
    """Weaviate when TRELLIS_WEAVIATE_URL is set, else SQLite under the data directory (not opened yet)."""
    if cfg.weaviate_url:
        from services.retrieval.backends.weaviate import WeaviateBackend

        return WeaviateBackend(cfg.weaviate_url, api_key=cfg.weaviate_api_key, grpc_port=cfg.weaviate_grpc_port)
    from services.retrieval.backends.sqlite import SqliteBackend

    return SqliteBackend(cfg.data_dir, vector_cache_bytes=cfg.vector_cache_mb * 1024 * 1024)


__all__ = ["Backend", "open_backend"]
