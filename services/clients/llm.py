"""LlmClient: what other services (the orchestrator's LLM, Agent and Categorize components, retrieval)
call to reach the gateway. Domain types in, domain types out; gRPC errors come back as `ServiceError`
with the gateway's status code and message, `retryable` set for UNAVAILABLE and RESOURCE_EXHAUSTED.

    client = LlmClient.connect("127.0.0.1:50052")
    async for delta in client.stream_chat("", [Message("user", "hi")], timeout=30):
        ...
    result = await client.chat("qwen-plus@Tongyi-Qianwen", messages, tools=tools)   # assembled turn
    vectors = (await client.embed(["a", "b"])).vectors
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Sequence

import grpc
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from services.common.channels import open_channel
from services.common.coalesce import coalesce
from services.common.errors import ServiceError
from services.llm_gateway import convert
from services.llm_gateway.models import (
    ChatCall,
    ChatDelta,
    ChatResult,
    Embeddings,
    Message,
    ModelType,
    RerankScore,
    ResponseFormat,
    Sampling,
    Tool,
    ToolCallAssembler,
    ToolChoice,
    Usage,
    merge_deltas,
)

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}


@dataclass(frozen=True)
class ModelListing:
    id: str
    type: ModelType
    provider: str
    is_default: bool


@dataclass(frozen=True)
class Ranking:
    scores: list[RerankScore]  # best first
    method: str  # "provider" or "embedding_similarity"
    model: str


def _error(exc: grpc.aio.AioRpcError) -> ServiceError:
    message = exc.details() or exc.code().name
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):  # the service went away, not the model
        message = f"the llm_gateway is unavailable: {message}"
    return ServiceError(message, code=exc.code(), retryable=exc.code() in _RETRYABLE)


class LlmClient:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._stub = llm_grpc.LlmServiceStub(channel)

    @classmethod
    def connect(cls, address: str) -> "LlmClient":
        return cls(open_channel(address))

    async def close(self) -> None:
        await self._channel.close()

    async def stream_chat(
        self,
        model_id: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] = (),
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
        sampling: Sampling = Sampling(),
        max_tokens: int = 0,
        stop: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[ChatDelta]:
        """The turn's deltas as they arrive. Breaking out of the loop cancels the call (and the upstream request)."""
        call = ChatCall("", tuple(messages), tuple(tools), tool_choice, response_format, sampling, max_tokens, tuple(stop))
        async for _, delta in self._chat(model_id, call, timeout):
            yield delta

    async def chat(
        self,
        model_id: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] = (),
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
        sampling: Sampling = Sampling(),
        max_tokens: int = 0,
        stop: Sequence[str] = (),
        timeout: float | None = None,
    ) -> ChatResult:
        """The whole turn, with tool calls assembled from their deltas."""
        call = ChatCall("", tuple(messages), tuple(tools), tool_choice, response_format, sampling, max_tokens, tuple(stop))
        content: list[str] = []
        assembler = ToolCallAssembler()
        finish, usage, model = None, Usage(), ""
        async for first_model, delta in self._chat(model_id, call, timeout):
            model = model or first_model
            content.append(delta.content)
            for tc in delta.tool_calls:
                assembler.add(tc)
            finish = delta.finish_reason or finish
            usage = delta.usage or usage
        return ChatResult("".join(content), assembler.calls(), finish, usage, model)

    async def _chat(self, model_id: str, call: ChatCall, timeout: float | None) -> AsyncIterator[tuple[str, ChatDelta]]:
        """(model, delta) pairs; the model id rides on the first. Deltas that arrive while the caller is busy
        with the previous one come merged (services/common/coalesce.py)."""
        async for item in coalesce(self._chunks(model_id, call, timeout), _merge_chunks):
            yield item

    async def _chunks(self, model_id: str, call: ChatCall, timeout: float | None) -> AsyncIterator[tuple[str, ChatDelta]]:
        rpc = self._stub.Chat(convert.chat_request_to_proto(model_id, call), timeout=timeout)
        try:
            async for chunk in rpc:
                yield chunk.model, convert.delta_from_proto(chunk)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc) from None
        finally:
            rpc.cancel()  # a no-op when the call already ended

    async def embed(self, texts: Sequence[str], *, model_id: str = "", timeout: float | None = None) -> Embeddings:
        try:
            resp = await self._stub.Embed(llm_pb.EmbedRequest(model_id=model_id, texts=list(texts)), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc) from None
        return Embeddings([list(e.values) for e in resp.embeddings], resp.usage.prompt_tokens)

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        model_id: str = "",
        top_n: int = 0,
        embedding_model_id: str = "",
        timeout: float | None = None,
    ) -> Ranking:
        req = llm_pb.RerankRequest(
            model_id=model_id, query=query, documents=list(documents), top_n=top_n, embedding_model_id=embedding_model_id
        )
        try:
            resp = await self._stub.Rerank(req, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc) from None
        method = {v: k for k, v in convert.RERANK_METHODS_PB.items()}.get(resp.method, "")
        return Ranking([RerankScore(r.index, r.relevance_score) for r in resp.results], method, resp.model)

    async def list_models(self, type: ModelType | None = None) -> list[ModelListing]:
        req = llm_pb.ListModelsRequest(type=convert.MODEL_TYPES_PB[type] if type else 0)
        try:
            resp = await self._stub.ListModels(req)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc) from None
        return [ModelListing(m.id, convert.MODEL_TYPES[m.type], m.provider, m.is_default) for m in resp.models]


def _merge_chunks(a: tuple[str, ChatDelta], b: tuple[str, ChatDelta]) -> tuple[str, ChatDelta] | None:
    merged = merge_deltas(a[1], b[1])
    return None if merged is None else (a[0] or b[0], merged)
