"""Any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp server, DeepSeek...) via the `openai` package.

One provider per endpoint (base URL + key). The SDK's own retries are off (`max_retries=0`): the gateway
retries, with one policy for every provider, and only errors marked retryable.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Sequence

import grpc
import httpx
import openai

from services.common.errors import ServiceError
from services.llm_gateway.errors import (
    ModelNotFound,
    ProviderAuthFailed,
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
)
from services.llm_gateway.providers import _openai_format as fmt
from services.llm_gateway.providers._openai_stream import FINISH as _FINISH
from services.llm_gateway.providers._openai_stream import deltas as stream_deltas
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.types import (
    ChatCall,
    ChatDelta,
    Embeddings,
    RerankScore,
    ToolCallDelta,
    Usage,
)

log = logging.getLogger(__name__)


class OpenAIProvider(Provider):
    kind = "openai"

    def __init__(
        self,
        label: str,
        *,
        base_url: str | None,
        api_key: str | None,
        stream: bool = True,
        stream_usage: bool = True,
        rerank_models: frozenset[str] = frozenset(),
    ) -> None:
        """`label` names the endpoint in errors and metrics (the RAGFlow factory, e.g. "DeepSeek").

        `stream=False` asks the endpoint for whole answers (for servers that cannot stream) and
        re-emits them as one chunk; `stream_usage=False` drops `stream_options`, which a few servers reject.
        """
        self.label = label
        self._stream = stream
        self._stream_usage = stream_usage
        self._rerank_models = rerank_models
        # A local server needs no key, but the SDK insists on one.
        self._client = openai.AsyncOpenAI(base_url=base_url or None, api_key=api_key or "unused", max_retries=0)

    async def stream(self, call: ChatCall, *, timeout: float) -> AsyncIterator[ChatDelta]:
        kwargs = fmt.chat_kwargs(call)
        if not self._stream:
            try:
                completion = await self._client.chat.completions.create(**kwargs, timeout=timeout)
            except openai.OpenAIError as exc:
                raise map_error(exc, f"{self.label} {call.model}") from exc
            yield _from_completion(completion)
            return
        if self._stream_usage:
            kwargs["stream_options"] = {"include_usage": True}
        where = f"{self.label} {call.model}"
        # The raw response, read as SSE bytes (providers/_openai_stream.py): the SDK's typed chunk per token
        # costs more than the rest of the hop. Leaving the context closes the connection, which is what stops
        # the upstream request when the consumer is cancelled (client cancel, deadline): dropped, not drained.
        try:
            async with self._client.chat.completions.with_streaming_response.create(
                **kwargs, stream=True, timeout=timeout
            ) as response:
                async for delta in stream_deltas(response.iter_bytes(), where):
                    yield delta
        except openai.OpenAIError as exc:
            raise map_error(exc, where) from exc
        except httpx.TimeoutException as exc:
            raise ProviderTimeout(f"{where}: the provider stopped answering mid-stream ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"{where}: the stream broke: {type(exc).__name__}: {exc}", retryable=False) from exc

    async def embed(self, model: str, texts: Sequence[str], *, timeout: float) -> Embeddings:
        try:
            resp = await self._client.embeddings.create(
                model=model, input=list(texts), encoding_format="float", timeout=timeout
            )
        except openai.OpenAIError as exc:
            raise map_error(exc, f"{self.label} {model}") from exc
        vectors = [d.embedding for d in sorted(resp.data, key=lambda d: d.index)]
        tokens = resp.usage.prompt_tokens if resp.usage is not None else 0
        return Embeddings(vectors=[list(map(float, v)) for v in vectors], prompt_tokens=tokens or 0)

    def has_rerank(self, model: str) -> bool:
        return model in self._rerank_models

    async def rerank(
        self, model: str, query: str, documents: Sequence[str], *, top_n: int, timeout: float
    ) -> list[RerankScore]:
        # Not part of the OpenAI API: the `/rerank` route that vLLM, Jina, Xinference and Cohere-style
        # servers share: {model, query, documents, top_n} -> {results: [{index, relevance_score}]}.
        body: dict[str, Any] = {"model": model, "query": query, "documents": list(documents)}
        if top_n > 0:
            body["top_n"] = top_n
        try:
            data = await self._client.post("/rerank", cast_to=object, body=body, options={"timeout": timeout})
        except openai.OpenAIError as exc:
            raise map_error(exc, f"{self.label} {model}") from exc
        try:
            return [RerankScore(int(r["index"]), float(r["relevance_score"])) for r in data["results"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderUnavailable(f"{self.label} {model}: unexpected rerank response: {str(data)[:200]}") from exc

    async def aclose(self) -> None:
        await self._client.close()


def _from_completion(completion: Any) -> ChatDelta:
    choice = completion.choices[0]
    msg = choice.message
    calls = tuple(
        ToolCallDelta(i, tc.id or "", tc.function.name, tc.function.arguments or "")
        for i, tc in enumerate(msg.tool_calls or ())
    )
    finish = _FINISH.get(choice.finish_reason or "stop", "stop")
    if calls and finish == "stop":
        finish = "tool_calls"
    usage = Usage(completion.usage.prompt_tokens or 0, completion.usage.completion_tokens or 0) if completion.usage else None
    return ChatDelta(content=msg.content or "", tool_calls=calls, finish_reason=finish, usage=usage)


def _provider_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    return exc.message


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(header)
        if raw:
            try:
                return float(raw) / divisor
            except ValueError:
                return None  # an HTTP date: rare from model servers; the backoff decides
    return None


def map_error(exc: openai.OpenAIError, where: str) -> ServiceError:
    """The SDK's exception -> a gateway error carrying the provider's own message."""
    if isinstance(exc, openai.APITimeoutError):
        return ProviderTimeout(f"{where}: the provider did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        return ProviderUnavailable(f"{where}: cannot reach the provider: {exc.message}{detail}")
    if isinstance(exc, openai.APIStatusError):
        message = f"{where}: {_provider_message(exc)} (HTTP {exc.status_code})"
        status = exc.status_code
        if status == 429:
            return ProviderRateLimited(message, retry_after_s=_retry_after(exc))
        if status == 401:
            return ProviderAuthFailed(message, code=grpc.StatusCode.UNAUTHENTICATED)
        if status == 403:
            return ProviderAuthFailed(message)
        if status == 404:
            return ModelNotFound(message)
        if status in (408, 409) or status >= 500:
            return ProviderUnavailable(message)
        return ProviderRejected(message)
    if isinstance(exc, openai.APIError):  # an error event inside a stream
        return ProviderUnavailable(f"{where}: {_provider_message(exc)}", retryable=False)
    return ProviderUnavailable(f"{where}: {exc}", retryable=False)
