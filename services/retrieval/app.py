"""Builds the retrieval service from its config: the backend, the LLM gateway peer and the servicer."""

from __future__ import annotations

from services.common.server import Service
from services.retrieval.backends import open_backend
from services.retrieval.config import RetrievalConfig
from services.retrieval.llm import LlmPeer
from services.retrieval.server import RetrievalServicer


def build(cfg: RetrievalConfig) -> Service:
    """Nothing is opened yet: the start-up hook opens the backend; the channel connects lazily."""
    llm = LlmPeer.connect(cfg.llm_gateway_addr, batch=cfg.embed_batch, concurrency=cfg.embed_concurrency,
                          timeout_s=cfg.llm_timeout_s)
    servicer = RetrievalServicer(cfg, open_backend(cfg), llm)
    return Service([servicer.binding()], on_startup=[servicer.start], on_shutdown=[servicer.aclose])
