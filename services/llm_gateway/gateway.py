"""The gateway's logic: resolve the model, call its provider under deadlines and retries, record metrics.

`server.py` only converts protobuf to these calls and back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping, Sequence

import grpc

from services.common.coalesce import Linger
from services.common.errors import InvalidArgument, ServiceError
from services.llm_gateway import metrics
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.providers import get_kind
from services.llm_gateway.providers import local as local_models
from services.llm_gateway.providers.local import LocalProvider
from services.llm_gateway.providers.openai import OpenAIProvider
from services.llm_gateway.providers.scripted import ScriptBook, ScriptedProvider
from services.llm_gateway.registry import Registry, Resolved
from services.llm_gateway.robust import Budget, CallPolicy, call_with_retries, stream_with_retries
from services.llm_gateway.tracing import traced_chat
from services.llm_gateway.models import ChatCall, ChatDelta, Embeddings, ModelType, RerankScore

log = logging.getLogger(__name__)

LOCAL_FACTORY = "Local"
SCRIPTED_FACTORY = "Scripted"
OPENAI_FACTORY = "OpenAI"


@dataclass(frozen=True)
class ChatStream:
    """A resolved chat turn: `model` is known before the first delta arrives."""

    model: str
    deltas: AsyncIterator[ChatDelta]
    notice: str = ""  # the fallback ran `model` in place of the id asked for (registry.py)


@dataclass(frozen=True)
class RerankOutcome:
    scores: list[RerankScore]  # best first
    method: str  # "provider" or "embedding_similarity"
    model: str  # the model that scored


class LlmGateway:
    def __init__(self, registry: Registry, policy: CallPolicy, linger: Linger | None = None) -> None:
        self.registry = registry
        self.policy = policy
        self.linger = linger  # how chat streams pace themselves under load: one per process, it counts them all

    @classmethod
    def create(cls, cfg: LlmGatewayConfig, *, scripts: ScriptBook | Mapping[str, Any] | None = None) -> "LlmGateway":
        """Build from settings. `scripts` is a script book handed over in process (tests, demos)."""
        registry = Registry()
        _register_providers(registry, cfg, _script_book(cfg, scripts))
        _set_defaults(registry, cfg)
        policy = CallPolicy(cfg.timeout_s, cfg.stream_idle_s, cfg.max_attempts, cfg.backoff_s, cfg.backoff_max_s)
        return cls(registry, policy, Linger(cfg.stream_pacing))

    def scripted(self) -> ScriptedProvider | None:
        """The scripted provider, when one is configured (tests read its `calls`)."""
        return next((p for p in self.registry.providers if isinstance(p, ScriptedProvider)), None)

    async def aclose(self) -> None:
        await self.registry.aclose()

    def _budget(self, timeout_s: float | None) -> Budget:
        seconds = self.policy.timeout_s if timeout_s is None else min(timeout_s, self.policy.timeout_s)
        return Budget(seconds)

    # -- chat -------------------------------------------------------------------------------------------
    def chat(self, model_id: str, call: ChatCall, *, timeout_s: float | None = None) -> ChatStream:
        """Resolve now (an unknown id fails before any streaming) and stream the turn."""
        if not call.messages:
            raise InvalidArgument("Chat: messages is empty")
        if call.max_tokens < 0:
            raise InvalidArgument(f"Chat: max_tokens is {call.max_tokens}; use 0 for the provider's default")
        resolved = self.registry.resolve(model_id, "chat")
        call = dataclasses.replace(call, model=resolved.upstream)
        if resolved.notice:
            log.warning("%s", resolved.notice)
        deltas = traced_chat(resolved, call, self._chat(resolved, call, self._budget(timeout_s)))  # a span when tracing is on
        return ChatStream(resolved.id, deltas, resolved.notice)

    async def _chat(self, r: Resolved, call: ChatCall, budget: Budget) -> AsyncIterator[ChatDelta]:
        labels = (r.factory, r.upstream)
        start = time.perf_counter()
        first = True
        code = "OK"
        try:
            deltas = stream_with_retries(
                lambda left: r.provider.stream(call, timeout=left),
                policy=self.policy,
                budget=budget,
                where=f"{r.factory} {r.upstream}",
                on_retry=lambda exc: metrics.RETRIES.labels(*labels, "chat").inc(),
            )
            # aclosing: if our consumer stops early, the provider's stream (and its connection) closes now,
            # not whenever the garbage collector finalises the generator.
            async with aclosing(deltas):
                async for delta in deltas:
                    if first and (delta.content or delta.tool_calls):
                        first = False
                        metrics.TIME_TO_FIRST_TOKEN.labels(*labels).observe(time.perf_counter() - start)
                    if delta.usage is not None:
                        metrics.TOKENS.labels(*labels, "in").inc(delta.usage.prompt_tokens)
                        metrics.TOKENS.labels(*labels, "out").inc(delta.usage.completion_tokens)
                    yield delta
        except ServiceError as exc:
            code = exc.code.name
            raise
        except (asyncio.CancelledError, GeneratorExit):
            code = grpc.StatusCode.CANCELLED.name
            raise
        finally:
            metrics.LATENCY.labels(*labels, "chat").observe(time.perf_counter() - start)
            if code != "OK":
                metrics.ERRORS.labels(*labels, "chat", code).inc()

    # -- embeddings -------------------------------------------------------------------------------------
    async def embed(self, model_id: str, texts: Sequence[str], *, timeout_s: float | None = None) -> tuple[str, Embeddings]:
        if not texts:
            raise InvalidArgument("Embed: texts is empty")
        r = self.registry.resolve(model_id, "embedding")
        return r.id, await self._embed(r, texts, self._budget(timeout_s))

    async def _embed(self, r: Resolved, texts: Sequence[str], budget: Budget) -> Embeddings:
        result = await self._measured(
            r, "embed", lambda left: r.provider.embed(r.upstream, texts, timeout=left), budget
        )
        if len(result.vectors) != len(texts):
            raise ServiceError(f"{r.factory} {r.upstream}: {len(result.vectors)} vectors for {len(texts)} texts")
        metrics.TOKENS.labels(r.factory, r.upstream, "in").inc(result.prompt_tokens)
        return result

    # -- rerank -----------------------------------------------------------------------------------------
    async def rerank(
        self,
        model_id: str,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int = 0,
        embedding_model_id: str = "",
        timeout_s: float | None = None,
    ) -> RerankOutcome:
        if top_n < 0:
            raise InvalidArgument(f"Rerank: top_n is {top_n}; use 0 for all documents")
        budget = self._budget(timeout_s)
        wanted = model_id.strip() or self.registry.default("rerank")
        r = self.registry.resolve(wanted, "rerank") if wanted else None
        if not documents:
            return RerankOutcome([], "provider" if r and r.provider.has_rerank(r.upstream) else "embedding_similarity",
                                 r.id if r else "")
        if r is not None and r.provider.has_rerank(r.upstream):
            scores = await self._measured(
                r, "rerank",
                lambda left: r.provider.rerank(r.upstream, query, documents, top_n=top_n, timeout=left), budget,
            )
            return RerankOutcome(_best_first(scores, top_n), "provider", r.id)
        # No rerank model (or one whose provider cannot rerank): cosine similarity of embeddings.
        e = self.registry.resolve(embedding_model_id, "embedding")
        vectors = (await self._embed(e, [query, *documents], budget)).vectors
        q = vectors[0]
        scores = [RerankScore(i, _cosine(q, v)) for i, v in enumerate(vectors[1:])]
        return RerankOutcome(_best_first(scores, top_n), "embedding_similarity", e.id)

    # -- listing ----------------------------------------------------------------------------------------
    def list_models(self, type: ModelType | None = None) -> list[tuple[Resolved, bool]]:
        return [(m, d) for m, d in self.registry.models() if type is None or m.type == type]

    async def _measured(self, r: Resolved, op: str, fn: Any, budget: Budget) -> Any:
        labels = (r.factory, r.upstream)
        start = time.perf_counter()
        try:
            return await call_with_retries(
                fn, policy=self.policy, budget=budget, where=f"{r.factory} {r.upstream}",
                on_retry=lambda exc: metrics.RETRIES.labels(*labels, op).inc(),
            )
        except ServiceError as exc:
            metrics.ERRORS.labels(*labels, op, exc.code.name).inc()
            raise
        except asyncio.CancelledError:
            metrics.ERRORS.labels(*labels, op, "CANCELLED").inc()
            raise
        finally:
            metrics.LATENCY.labels(*labels, op).observe(time.perf_counter() - start)


def _register_providers(registry: Registry, cfg: LlmGatewayConfig, book: ScriptBook | None) -> None:
    if cfg.local_enabled:
        local = LocalProvider(threads=cfg.local_threads, context=cfg.local_context, queue=cfg.local_queue)
        registry.add_model(local_models.CHAT_MODEL, LOCAL_FACTORY, "chat", local)
        registry.add_model(local_models.EMBEDDING_MODEL, LOCAL_FACTORY, "embedding", local)
    if cfg.openai_base_url or cfg.openai_api_key:
        env_openai = OpenAIProvider(OPENAI_FACTORY, base_url=cfg.openai_base_url, api_key=cfg.openai_api_key)
        registry.add_open_factory(OPENAI_FACTORY, env_openai, bare_names=True)
    file_factories = cfg.providers.factories if cfg.providers else {}
    declared = {name.lower() for name in file_factories}
    for name, endpoint in cfg.factory_endpoints.items():
        if name.lower() not in declared:  # the providers file's entry for a factory wins
            provider = OpenAIProvider(name, base_url=endpoint.base_url, api_key=endpoint.api_key)
            registry.add_open_factory(name, provider)
    for factory, spec in file_factories.items():
        provider = get_kind(spec.kind).from_spec(factory, spec)  # the kind's own settings build it
        if spec.open:
            registry.add_open_factory(factory, provider)
        for name, m in spec.models.items():
            registry.add_model(name, factory, m.type, provider, m.model)
    if book is not None:
        scripted = ScriptedProvider(book)
        for section in ("chat", "embedding", "rerank"):
            for name in getattr(book, section):
                registry.add_model(name, SCRIPTED_FACTORY, section, scripted)  # type: ignore[arg-type]


def _set_defaults(registry: Registry, cfg: LlmGatewayConfig) -> None:
    """Env beats the providers file, which beats the local models. A default that names nothing stops start-up."""
    file = cfg.providers
    local_chat = f"{local_models.CHAT_MODEL}@{LOCAL_FACTORY}" if cfg.local_enabled else ""
    local_embed = f"{local_models.EMBEDDING_MODEL}@{LOCAL_FACTORY}" if cfg.local_enabled else ""
    defaults: list[tuple[ModelType, str, str]] = [
        ("chat", "TRELLIS_DEFAULT_CHAT_MODEL", cfg.default_chat_model or (file.default_chat_model if file else "") or local_chat),
        ("embedding", "TRELLIS_DEFAULT_EMBEDDING_MODEL",
         cfg.default_embedding_model or (file.default_embedding_model if file else "") or local_embed),
        ("rerank", "default_rerank_model", file.default_rerank_model if file else ""),
    ]
    for type_, source, model_id in defaults:
        try:
            registry.set_default(type_, model_id)
        except ServiceError as exc:
            raise SystemExit(f"llm_gateway: {source}={model_id!r}: {exc.message}") from None
    registry.fallback = cfg.model_fallback
    if (cfg.openai_base_url or cfg.openai_api_key) and local_chat and registry.default("chat") == local_chat:
        log.warning("OPENAI_BASE_URL is set but TRELLIS_DEFAULT_CHAT_MODEL is not: llm_id \"\" runs the local model")


def _script_book(cfg: LlmGatewayConfig, scripts: ScriptBook | Mapping[str, Any] | None) -> ScriptBook | None:
    if isinstance(scripts, ScriptBook):
        return scripts
    if scripts is not None:
        return ScriptBook.parse(scripts)
    return ScriptBook.load(cfg.scripts_file) if cfg.scripts_file else None


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _best_first(scores: list[RerankScore], top_n: int) -> list[RerankScore]:
    ranked = sorted(scores, key=lambda s: (-s.score, s.index))
    return ranked[:top_n] if top_n > 0 else ranked
