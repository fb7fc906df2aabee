"""Retrieval service settings, read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import DEFAULT_PORTS, ServerConfig


@dataclass(frozen=True)
class RetrievalConfig:
    server: ServerConfig

    @classmethod
    def from_env(cls) -> "RetrievalConfig":
        port, metrics_port = DEFAULT_PORTS["retrieval"]
        return cls(server=ServerConfig.from_env("retrieval", port, metrics_port))
