"""LlmServicer: the thin protobuf <-> gateway adapter (the work is in gateway.py)."""

from __future__ import annotations

from contextlib import aclosing
from typing import AsyncIterator

import grpc
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from services.common.coalesce import coalesce
from services.common.server import Binding
from services.llm_gateway import convert
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.models import merge_deltas, whole_turn

SERVICE_NAME = llm_pb.DESCRIPTOR.services_by_name["LlmService"].full_name


class LlmServicer(llm_grpc.LlmServiceServicer):
    def __init__(self, gateway: LlmGateway) -> None:
        self.gateway = gateway

    def binding(self) -> Binding:
        return Binding(llm_grpc.add_LlmServiceServicer_to_server, self, SERVICE_NAME)

    async def Chat(self, request: llm_pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[llm_pb.ChatResponse]:
        async with aclosing(self.chunks(request, context.time_remaining())) as chunks:  # a cancel closes it at once
            async for chunk in chunks:
                yield chunk

    async def chunks(self, request: llm_pb.ChatRequest, timeout_s: float | None) -> AsyncIterator[llm_pb.ChatResponse]:
        """One turn's chunks, for a Chat call or a streamed turn (chat_turns.py)."""
        call = convert.chat_call_from_proto(request)
        stream = self.gateway.chat(request.model_id, call, timeout_s=timeout_s)
        model, notice = stream.model, stream.notice
        # While one chunk is being written to the orchestrator, what the provider sends meanwhile merges; under
        # load a stream also lingers between chunks. The gateway is where tokens enter the pipeline: a merge here
        # spares every hop after it.
        async for delta in coalesce(stream.deltas, merge_deltas, linger=self.gateway.linger):
            yield convert.delta_to_proto(delta, model, notice)
            model = notice = ""  # the resolved id and the fallback notice ride on the first chunk only

    async def Complete(self, request: llm_pb.ChatRequest, context: grpc.aio.ServicerContext) -> llm_pb.ChatResponse:
        return await self.whole(request, context.time_remaining())

    async def whole(self, request: llm_pb.ChatRequest, timeout_s: float | None) -> llm_pb.ChatResponse:
        """One whole turn, for a Complete call or a whole turn (chat_turns.py)."""
        call = convert.chat_call_from_proto(request)
        stream = self.gateway.chat(request.model_id, call, timeout_s=timeout_s)
        # A cancelled call raises inside the provider's read, which closes the upstream request at once.
        whole = whole_turn([d async for d in stream.deltas])
        return convert.delta_to_proto(whole, stream.model, stream.notice)

    async def Embed(self, request: llm_pb.EmbedRequest, context: grpc.aio.ServicerContext) -> llm_pb.EmbedResponse:
        model, result = await self.gateway.embed(request.model_id, list(request.texts), timeout_s=context.time_remaining())
        out = llm_pb.EmbedResponse(dimension=result.dimension, model=model)
        for vector in result.vectors:
            out.embeddings.add(values=vector)
        out.usage.prompt_tokens = out.usage.total_tokens = result.prompt_tokens
        return out

    async def Rerank(self, request: llm_pb.RerankRequest, context: grpc.aio.ServicerContext) -> llm_pb.RerankResponse:
        outcome = await self.gateway.rerank(
            request.model_id,
            request.query,
            list(request.documents),
            top_n=request.top_n,
            embedding_model_id=request.embedding_model_id,
            timeout_s=context.time_remaining(),
        )
        out = llm_pb.RerankResponse(method=convert.RERANK_METHODS_PB[outcome.method], model=outcome.model)
        for s in outcome.scores:
            out.results.add(index=s.index, relevance_score=s.score)
        return out

    async def ListModels(self, request: llm_pb.ListModelsRequest, context: grpc.aio.ServicerContext) -> llm_pb.ListModelsResponse:
        models = self.gateway.list_models(convert.MODEL_TYPES.get(request.type))
        out = llm_pb.ListModelsResponse(open_factories=self.gateway.registry.open_factories())
        for m, is_default in models:
            out.models.add(
                id=m.id, type=convert.MODEL_TYPES_PB[m.type], provider=m.provider.kind, is_default=is_default
            )
        return out
