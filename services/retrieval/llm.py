"""The retrieval service's use of the LLM gateway: batched embeddings as unit vectors, and rerank scores.

The calls go through `LlmClient` (services/clients/llm.py), which owns the protocol, deadlines, errors and
retries; this module adds what retrieval needs on top. Vectors come back as unit-length float32 rows, so
cosine similarity is a dot product everywhere after.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import numpy as np

from services.clients import LlmClient
from services.common.errors import ServiceError


def normalize(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def _about(what: str, exc: ServiceError) -> ServiceError:
    """The same error (class, code, retryable) with what retrieval was doing in front of its message."""
    return type(exc)(f"{what}: {exc.message}", code=exc.code, retryable=exc.retryable)


class LlmPeer:
    def __init__(self, client: LlmClient, *, batch: int = 32, concurrency: int = 2, timeout_s: float = 120.0) -> None:
        self.client = client
        self.batch = max(1, batch)
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s

    @classmethod
    def connect(cls, address: str, **kwargs: Any) -> "LlmPeer":
        return cls(LlmClient.connect(address), **kwargs)

    async def close(self) -> None:
        await self.client.close()

    async def _embed_once(self, texts: Sequence[str], model: str) -> tuple[np.ndarray, str]:
        try:
            result = await self.client.embed(texts, model_id=model, timeout=self.timeout_s)
        except ServiceError as exc:
            raise _about("embedding", exc) from None
        if len(result.vectors) != len(texts):
            raise ServiceError(f"embedding: llm_gateway returned {len(result.vectors)} vectors for {len(texts)} texts")
        rows = np.array(result.vectors, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] == 0:
            raise ServiceError("embedding: llm_gateway returned empty vectors")
        return normalize(rows), result.model

    async def embed(self, texts: Sequence[str], model: str = "") -> tuple[np.ndarray, str]:
        """Unit vectors for `texts` (one row each, same order) and the resolved model id.

        Batches of `batch` texts, at most `concurrency` calls in flight: the gateway's local model works
        one batch at a time, and a second request queued behind it hides the round trip.
        """
        if not texts:
            return np.zeros((0, 0), dtype=np.float32), model
        batches = [texts[i : i + self.batch] for i in range(0, len(texts), self.batch)]
        gate = asyncio.Semaphore(self.concurrency)

        async def one(batch: Sequence[str]) -> tuple[np.ndarray, str]:
            async with gate:
                return await self._embed_once(batch, model)

        results = await asyncio.gather(*(one(b) for b in batches))
        dims = {r.shape[1] for r, _ in results}
        if len(dims) != 1:
            raise ServiceError(f"embedding: model {model or 'default'} returned vectors of sizes {sorted(dims)}")
        return np.vstack([r for r, _ in results]), results[0][1]

    async def rerank(self, query: str, documents: Sequence[str], model: str) -> list[float]:
        """One relevance score per document, in the documents' order."""
        try:
            ranking = await self.client.rerank(query, documents, model_id=model, timeout=self.timeout_s)
        except ServiceError as exc:
            raise _about(f"rerank with {model!r}", exc) from None
        scores = [0.0] * len(documents)
        for r in ranking.scores:
            if 0 <= r.index < len(scores):
                scores[r.index] = float(r.score)
        return scores
