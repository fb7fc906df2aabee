"""The models the llm_gateway serves, as RAGFlow's dataset routes read a tenant's models: which embedding
model a dataset may name (its verify_embedding_availability), and the defaults an empty one and a
parser_config's `llm_id` get.

    listing = await request.app[MODELS].listing()
    listing.default("embedding")                    # "" when none is configured
    listing.embedding_problem("unknown@ZHIPU-AI")   # RAGFlow's message, or None when it resolves

The llm_gateway's ListModels names its declared models, its defaults and its open factories (any name
resolves there); RAGFlow's "name@instance@Factory" resolves as "name@Factory" does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from aiohttp import web
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from gateway.errors import GatewayError

_TYPES = {llm_pb.MODEL_TYPE_CHAT: "chat", llm_pb.MODEL_TYPE_EMBEDDING: "embedding", llm_pb.MODEL_TYPE_RERANK: "rerank"}


@dataclass(frozen=True)
class Listing:
    models: dict[str, str] = field(default_factory=dict)  # lowercase id -> type
    factories: frozenset[str] = frozenset()  # lowercase factories with at least one declared model
    open_factories: frozenset[str] = frozenset()  # lowercase
    defaults: dict[str, str] = field(default_factory=dict)  # type -> id

    def default(self, type_: str) -> str:
        return self.defaults.get(type_, "")

    def embedding_problem(self, model_id: str) -> str | None:
        """None when `model_id` names an embedding model served here, else RAGFlow's LookupError text."""
        name, _, factory = model_id.rpartition("@")
        short = f"{name.split('@', 1)[0]}@{factory}".lower()
        if self.models.get(model_id.lower()) == "embedding" or self.models.get(short) == "embedding":
            return None
        if factory.lower() in self.open_factories:
            return None
        if factory.lower() not in self.factories:
            return f"Provider {factory} not found for model {model_id}."
        return f"Model {model_id} not found for model embedding"


class ModelCatalog:
    def __init__(self, channel: grpc.aio.Channel, *, timeout_s: float) -> None:
        self._stub = llm_grpc.LlmServiceStub(channel)
        self._timeout_s = timeout_s

    async def listing(self) -> Listing:
        try:
            resp = await self._stub.ListModels(llm_pb.ListModelsRequest(), timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise GatewayError(f"the llm_gateway did not list its models: {exc.details() or exc.code().name}",
                               code=grpc.StatusCode.UNAVAILABLE) from None
        models = {m.id.lower(): _TYPES.get(m.type, "") for m in resp.models}
        return Listing(models=models, factories=frozenset(i.rpartition("@")[2] for i in models),
                       open_factories=frozenset(f.lower() for f in resp.open_factories),
                       defaults={_TYPES.get(m.type, ""): m.id for m in resp.models if m.is_default})


MODELS = web.AppKey("models", ModelCatalog)
