"""Typed clients of the peer services: one per service, the only way one service calls another.

    llm = LlmClient.connect(cfg.llm_gateway_addr)            # services/clients/llm.py
    retrieval = RetrievalClient.connect(cfg.retrieval_addr)  # services/clients/retrieval.py
    sandbox = SandboxClient.connect(cfg.sandbox_addr)        # services/clients/sandbox.py

A client owns everything about reaching its peer: proto <-> plain dataclasses, deadlines, the typed
errors a failure raises, and which failures are tried again (services/clients/_rpc.py). Callers see
dataclasses and `services.common.errors` types, never a `_pb2` message or `grpc.aio.AioRpcError`.
The package depends on the generated code (`trellis.*`), grpc and services/common only, never on a
service's own package, so any service may use it.
"""

from services.clients._rpc import RetryPolicy
from services.clients.llm import LlmClient, ModelListing, Ranking
from services.clients.retrieval import Chunk, DatasetRef, MetadataCondition, RetrievalClient
from services.clients.sandbox import SandboxClient, SandboxRun

__all__ = [
    "Chunk",
    "DatasetRef",
    "LlmClient",
    "MetadataCondition",
    "ModelListing",
    "Ranking",
    "RetrievalClient",
    "RetryPolicy",
    "SandboxClient",
    "SandboxRun",
]
