"""Any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp server, DeepSeek...) via the `openai` package.

One provider per endpoint (base URL + key). The SDK's own retries are off (`max_retries=0`): the gateway
retries, with one policy for every provider, and only errors marked retryable.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import urllib.parse
import urllib.request
from typing import Any, AsyncIterator, Literal, Mapping, Sequence

import aiohttp
import grpc
import openai
import orjson

from services.common.coalesce import read_pause
from services.common.errors import ServiceError
from services.llm_gateway import factories as known_factories
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
from services.llm_gateway.providers.base import Provider, ProviderSettings, register
from services.llm_gateway.models import (
    ChatCall,
    ChatDelta,
    Embeddings,
    RerankScore,
    ToolCallDelta,
    Usage,
)

log = logging.getLogger(__name__)

END_WAIT_S = 0.5  # after a stream's `[DONE]`, how long its body's end may take before the connection is dropped


class OpenAISettings(ProviderSettings):
    """A providers-file factory of kind `openai` (the default): services/llm_gateway/providers_file.py.

    For one of RAGFlow's factories that factories.py knows, `base_url` may be left out (RAGFlow's endpoint
    is used) and so may the key (its `<FACTORY>_API_KEY` is read when set)."""

    kind: Literal["openai"] = "openai"
    base_url: str = ""
    api_key: str = ""
    api_key_env: str = ""  # the variable holding the key, read at start-up
    stream: bool = True  # false: ask for whole answers (servers that cannot stream)
    stream_usage: bool = True  # false: don't send stream_options (servers that reject it)

    def with_environment(self, factory: str, environ: Mapping[str, str]) -> "OpenAISettings":
        if self.api_key_env:
            if not environ.get(self.api_key_env):
                raise ValueError(f"api_key_env: {self.api_key_env} is not set")
            return self.model_copy(update={"api_key": environ[self.api_key_env]})
        known = known_factories.find(factory)
        if known is not None and not self.api_key and environ.get(known.key_env):
            return self.model_copy(update={"api_key": environ[known.key_env]})
        return self


@register
class OpenAIProvider(Provider):
    kind = "openai"
    Settings = OpenAISettings

    @classmethod
    def from_spec(cls, factory: str, settings: ProviderSettings) -> "OpenAIProvider":
        assert isinstance(settings, OpenAISettings)
        known = known_factories.find(factory)
        return cls(
            factory,
            base_url=settings.base_url or (known.base_url if known else ""),
            api_key=settings.api_key,
            stream=settings.stream,
            stream_usage=settings.stream_usage,
            rerank_models=frozenset(m.model or n for n, m in settings.models.items() if m.type == "rerank"),
        )

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
        # Streams skip the SDK (its request building and typed chunks cost more than the rest of the hop): a
        # plain aiohttp POST to the SDK's own URL and headers, read as raw SSE (providers/_openai_stream.py).
        self._url = str(self._client.base_url).rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {self._client.api_key}", "Content-Type": "application/json",
                         "Accept": "text/event-stream"}
        self._http: aiohttp.ClientSession | None = None
        self._proxy = _env_proxy(self._url)

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
        kwargs["stream"] = True
        where = f"{self.label} {call.model}"
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        # The deadline is the gateway's (robust.py): it bounds every wait for the stream's next delta, the first
        # included, with one timer per stream. Here only the connect gets what is left of it: a read timeout
        # would re-arm a timer on every chunk the provider sends (its cost: docs/streaming.md).
        limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=None)
        started = False
        try:
            # Awaited, not `async with`: its context manager would keep the spent request coroutine (1.4 KB) for
            # as long as the stream lasts (docs/speed-policies.md, "Many held streams").
            resp = await self._http.post(self._url, data=orjson.dumps(kwargs), headers=self._headers,
                                         timeout=limits, proxy=self._proxy)
            try:
                if resp.status >= 400:
                    raw = await resp.read()
                    raise status_error(resp.status, _body(raw), resp.headers, where)
                async for delta in stream_deltas(_reads(resp.content), where):
                    started = True
                    yield delta
                await _read_to_end(resp)
            finally:
                # Not drained: closing drops the connection, which is what stops the upstream request when
                # the consumer is cancelled (client cancel, deadline).
                resp.close()
                await resp.wait_for_close()
        except asyncio.TimeoutError:
            raise ProviderTimeout(f"{where}: the provider did not answer in time") from None
        except aiohttp.ClientError as exc:
            if started:
                raise ProviderUnavailable(f"{where}: the stream broke: {type(exc).__name__}: {exc}", retryable=False) from exc
            raise ProviderUnavailable(f"{where}: cannot reach the provider: {type(exc).__name__}: {exc}") from exc

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
        if self._http is not None:
            await self._http.close()


async def _reads(body: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The body, each read taking everything that arrived since the last one, so a busy gateway reads (and
    forwards) many tokens per step instead of falling behind one token at a time. While the gateway's reader of
    this stream lingers (services/common/coalesce.py), what was read waits for it, or for the body's end, with
    what the model sends meanwhile (aiohttp keeps it): that is then parsed and passed on once, not chunk by
    chunk, as the one message the reader sends next."""
    ended: asyncio.Future[None] | None = None
    while chunk := await body.readany():
        pause = read_pause()
        if pause > 0 and not body.is_eof():
            if ended is None:
                ended = asyncio.get_running_loop().create_future()
                body.on_eof(functools.partial(_settle, ended))
            await asyncio.wait((ended,), timeout=pause)
            chunk += body.read_nowait()
        yield chunk


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _read_to_end(resp: aiohttp.ClientResponse) -> None:
    """After `[DONE]`: the body's end, which a server may send a moment later, so that the connection goes back
    to the pool instead of being dropped (a new connection per turn is a TLS handshake with a remote provider).
    A server that keeps the body open gets its connection closed after END_WAIT_S."""
    if resp.content.at_eof():
        return
    try:
        async with asyncio.timeout(END_WAIT_S):
            await resp.content.read()
    except (TimeoutError, aiohttp.ClientError):
        pass  # closed by the caller's resp.close()


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


def _env_proxy(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to `url` (NO_PROXY respected), read once: aiohttp's trust_env would
    read the environment and ~/.netrc again on every request, in a thread."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _body(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")[:500]


def _provider_message(body: Any, fallback: str) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    if isinstance(body, str) and body.strip():
        return body.strip()
    return fallback


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(header)
        if raw:
            try:
                return float(raw) / divisor
            except ValueError:
                return None  # an HTTP date: rare from model servers; the backoff decides
    return None


def status_error(status: int, body: Any, headers: Mapping[str, str], where: str, fallback: str = "") -> ServiceError:
    """An HTTP error answer -> a gateway error carrying the provider's own message."""
    message = f"{where}: {_provider_message(body, fallback or f'HTTP {status}')} (HTTP {status})"
    if status == 429:
        return ProviderRateLimited(message, retry_after_s=_retry_after(headers))
    if status == 401:
        return ProviderAuthFailed(message, code=grpc.StatusCode.UNAUTHENTICATED)
    if status == 403:
        return ProviderAuthFailed(message)
    if status == 404:
        return ModelNotFound(message)
    if status in (408, 409) or status >= 500:
        return ProviderUnavailable(message)
    return ProviderRejected(message)


def map_error(exc: openai.OpenAIError, where: str) -> ServiceError:
    """The SDK's exception (embeddings, rerank, whole answers) -> a gateway error with the provider's message."""
    if isinstance(exc, openai.APITimeoutError):
        return ProviderTimeout(f"{where}: the provider did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        return ProviderUnavailable(f"{where}: cannot reach the provider: {exc.message}{detail}")
    if isinstance(exc, openai.APIStatusError):
        return status_error(exc.status_code, exc.body, exc.response.headers, where, exc.message)
    if isinstance(exc, openai.APIError):
        return ProviderUnavailable(f"{where}: {_provider_message(exc.body, exc.message)}", retryable=False)
    return ProviderUnavailable(f"{where}: {exc}", retryable=False)
