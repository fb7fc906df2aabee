"""The provider interface: one class per provider kind, one file each (docs/adding-a-provider.md).

A provider only talks to its model. Resolution, deadlines, retries and metrics live in the gateway
(`gateway.py`), so every provider gets them the same way. What a provider must do itself:
- raise the errors of `errors.py` with the provider's own message (retryable ones marked so);
- stop its upstream work at once when the task consuming `stream()` is cancelled (close the HTTP response,
  tell the inference thread to stop), because that is how a client cancel or a deadline reaches it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import AsyncIterator, ClassVar, Sequence

from services.llm_gateway.errors import ModelUnavailable
from services.llm_gateway.models import ChatCall, ChatDelta, Embeddings, RerankScore


class Provider(ABC):
    kind: ClassVar[str]  # "openai", "local", "scripted"

    @abstractmethod
    def stream(self, call: ChatCall, *, timeout: float) -> AsyncIterator[ChatDelta]:
        """One assistant turn as deltas; the last one carries the finish reason (and usage when known)."""

    async def embed(self, model: str, texts: Sequence[str], *, timeout: float) -> Embeddings:
        raise ModelUnavailable(f"{self.kind} provider has no embedding models")

    def has_rerank(self, model: str) -> bool:
        """Whether `rerank()` can score with this model; otherwise the gateway ranks by embedding similarity."""
        return False

    async def rerank(
        self, model: str, query: str, documents: Sequence[str], *, top_n: int, timeout: float
    ) -> list[RerankScore]:
        raise ModelUnavailable(f"{self.kind} provider has no rerank models")

    async def aclose(self) -> None:
        """Release clients, threads and models. Idempotent."""
