"""Orchestrator settings, read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import DEFAULT_PORTS, ServerConfig, env_str, peer_address


@dataclass(frozen=True)
class OrchestratorConfig:
    server: ServerConfig
    redis_url: str  # TRELLIS_REDIS_URL: where agents, sessions and runs live (trellis up sets it)
    llm_gateway_addr: str  # TRELLIS_LLM_GATEWAY_ADDR
    retrieval_addr: str  # TRELLIS_RETRIEVAL_ADDR
    sandbox_addr: str  # TRELLIS_SANDBOX_ADDR

    @classmethod
    def from_env(cls) -> "OrchestratorConfig":
        port, metrics_port = DEFAULT_PORTS["orchestrator"]
        return cls(
            server=ServerConfig.from_env("orchestrator", port, metrics_port),
            redis_url=env_str("TRELLIS_REDIS_URL", "redis://127.0.0.1:6379/0"),
            llm_gateway_addr=peer_address("llm_gateway"),
            retrieval_addr=peer_address("retrieval"),
            sandbox_addr=peer_address("sandbox"),
        )
