"""Builds the LLM gateway from its config: the providers' registry, the servicer and its hooks."""

from __future__ import annotations

from services.common.server import Service
from services.llm_gateway.chat_turns import ChatTurnServicer
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.providers.local import LocalProvider
from services.llm_gateway.server import LlmServicer


def build(cfg: LlmGatewayConfig) -> Service:
    gateway = LlmGateway.create(cfg)  # nothing loads yet: local models load on first use
    # The local chat model's runtime against this CPU: one line at start, not SIGILL at the first token.
    checks = [p.check for p in gateway.registry.providers if isinstance(p, LocalProvider)]
    servicer = LlmServicer(gateway)
    turns = ChatTurnServicer(servicer)  # the orchestrator's chat turns (internal)
    return Service([servicer.binding(), turns.binding()], on_startup=checks, on_drain=[turns.turns.drain],
                   on_shutdown=[gateway.aclose])
