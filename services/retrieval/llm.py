"""The retrieval service's calls to llm_gateway: batched embeddings and rerank.

Vectors come back as unit-length float32 rows, so cosine similarity is a dot product everywhere after.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Sequence

import grpc
import numpy as np
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from services.common.channels import open_channel
from services.common.errors import ServiceError

log = logging.getLogger(__name__)

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED}


def _error(exc: grpc.aio.AioRpcError, what: str) -> ServiceError:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return ServiceError(f"{what}: llm_gateway is unavailable ({exc.details()})", code=code, retryable=True)
    return ServiceError(f"{what}: {exc.details() or code.name}", code=code, retryable=code in _RETRYABLE)


def normalize(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class LlmPeer:
    def __init__(self, channel: grpc.aio.Channel, *, batch: int = 32, concurrency: int = 2, timeout_s: float = 120.0) -> None:
        self._channel = channel
        self._stub = llm_grpc.LlmServiceStub(channel)
        self.batch = max(1, batch)
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s

    @classmethod
    def connect(cls, address: str, **kwargs: object) -> "LlmPeer":
        return cls(open_channel(address), **kwargs)  # type: ignore[arg-type]

    async def close(self) -> None:
        await self._channel.close()

    async def _embed_once(self, texts: Sequence[str], model: str) -> tuple[np.ndarray, str]:
        try:
            resp = await self._stub.Embed(llm_pb.EmbedRequest(model_id=model, texts=list(texts)), timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc, "embedding") from None
        if len(resp.embeddings) != len(texts):
            raise ServiceError(f"embedding: llm_gateway returned {len(resp.embeddings)} vectors for {len(texts)} texts")
        rows = np.array([list(e.values) for e in resp.embeddings], dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] == 0:
            raise ServiceError("embedding: llm_gateway returned empty vectors")
        return normalize(rows), resp.model

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
        req = llm_pb.RerankRequest(model_id=model, query=query, documents=list(documents))
        try:
            resp = await self._stub.Rerank(req, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc, f"rerank with {model!r}") from None
        scores = [0.0] * len(documents)
        for r in resp.results:
            if 0 <= r.index < len(scores):
                scores[r.index] = float(r.relevance_score)
        return scores
