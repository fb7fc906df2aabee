"""LlmClient: how the orchestrator's LLM, Agent and Categorize components and the retrieval service reach
the LLM gateway. Contract dataclasses in, contract dataclasses out (services/clients/llm_models.py);
failures are the typed errors of services/clients/_rpc.py.

    client = LlmClient.connect("127.0.0.1:50052")
    async for delta in client.stream_chat("", [Message("user", "hi")], timeout=30):
        ...
    result = await client.chat("qwen-plus@Tongyi-Qianwen", messages, tools=tools)   # assembled turn
    vectors = (await client.embed(["a", "b"])).vectors

The token stream is the hot path: every chat turn of a client, streamed or whole, rides one long-lived stream
per gateway replica with the others (trellis.llm.internal.v1.ChatTurnService, through services/common/turns/),
where a call per turn would cost both processes several times the CPU (docs/transport.md). A turn is used as
the Chat or Complete call it stands for, so it goes through the same `_stream`/`_unary` as any call: one code
path, one deadline, error and retry rule (services/clients/_rpc.py). Each chunk becomes one `ChatDelta`
(llm_convert.delta_from_proto), read by the caller itself. The gateway already merges what queued up while it
sent (services/common/coalesce.py), and each reader here buffers for itself (a StreamValue, an Agent's turn), so
a merging task in between would only cost a task switch per message.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, AsyncIterator, Sequence

from trellis.llm.internal.v1 import chat_turn_service_pb2 as turn_pb
from trellis.llm.internal.v1 import chat_turn_service_pb2_grpc as turn_grpc
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from services.clients import llm_convert as convert
from services.clients._rpc import Peer
from services.common.channels import channel_target
from services.common.turns import ClientTurnTypes, TurnClient
from services.clients.llm_models import (
    ChatDelta,
    ChatResult,
    Embeddings,
    Message,
    ModelType,
    RerankScore,
    assemble,
)


_TURN_TYPES = ClientTurnTypes(turn_pb.ChatTurnsRequest, turn_pb.ChatTurn, turn_pb.ChatTurnMessage)


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


class LlmClient(Peer):
    """The gateway's `LlmService`. No default deadline: a turn may stream for as long as the caller allows."""

    peer = "llm_gateway"
    stub = llm_grpc.LlmServiceStub

    def __init__(self, channel: Any, **kwargs: Any) -> None:
        super().__init__(channel, **kwargs)
        # Every chat turn of this client, on shared streams: `turns.call` is used as `Chat` would be.
        self.turns = TurnClient(turn_grpc.ChatTurnServiceStub(channel).ChatTurns, _TURN_TYPES, peer="LLM gateway",
                                target=channel_target(channel))
        self._whole = partial(self.turns.call, whole=True)  # as `Complete` would be

    async def close(self) -> None:
        await self.turns.close()
        await super().close()

    def stream_chat(self, model_id: str, messages: Sequence[Message], *, timeout: float | None = None,
                    **options: Any) -> AsyncIterator[ChatDelta]:
        """The turn's deltas as they arrive. `options` are `tools`, `tool_choice`, `response_format`,
        `sampling`, `max_tokens` and `stop` (llm_convert.chat_request_to_proto). Breaking out of the loop
        (or closing the iterator) cancels the call, and the upstream request."""
        req = convert.chat_request_to_proto(model_id, messages, **options)
        return self._stream(self.turns.call, req, convert.delta_from_proto, timeout)

    async def chat(self, model_id: str, messages: Sequence[Message], *, timeout: float | None = None,
                   **options: Any) -> ChatResult:
        """The whole turn in one message (as the gateway's Complete gives it, a turn on the shared stream), tool
        calls complete; `options` as for `stream_chat`."""
        req = convert.chat_request_to_proto(model_id, messages, **options)
        resp = await self._unary(self._whole, req, timeout)
        return assemble([convert.delta_from_proto(resp)], resp.model)

    async def embed(self, texts: Sequence[str], *, model_id: str = "", timeout: float | None = None) -> Embeddings:
        req = llm_pb.EmbedRequest(model_id=model_id, texts=list(texts))
        resp = await self._unary(self._stub.Embed, req, timeout)
        return Embeddings([list(e.values) for e in resp.embeddings], resp.usage.prompt_tokens, resp.model)

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
        resp = await self._unary(self._stub.Rerank, req, timeout)
        method = convert.RERANK_METHODS.get(resp.method, "")
        return Ranking([RerankScore(r.index, r.relevance_score) for r in resp.results], method, resp.model)

    async def list_models(self, type: ModelType | None = None, *, timeout: float | None = None) -> list[ModelListing]:
        req = llm_pb.ListModelsRequest(type=convert.MODEL_TYPES_PB[type] if type else 0)
        resp = await self._unary(self._stub.ListModels, req, timeout)
        return [ModelListing(m.id, convert.MODEL_TYPES[m.type], m.provider, m.is_default) for m in resp.models]

