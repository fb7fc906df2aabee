"""Gateway settings, read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import DEFAULT_HTTP_PORT, DEFAULT_PORTS, env_float, env_int, env_str, peer_address


@dataclass(frozen=True)
class GatewayConfig:
    host: str  # TRELLIS_HTTP_HOST: bind address, default 0.0.0.0
    port: int  # TRELLIS_HTTP_PORT: default 8080
    upstreams: dict[str, str]  # service name -> gRPC address (TRELLIS_<SERVICE>_ADDR)
    health_timeout_s: float  # TRELLIS_HEALTH_TIMEOUT_S: per upstream health check in /healthz

    @classmethod
    def from_env(cls) -> "GatewayConfig":
        return cls(
            host=env_str("TRELLIS_HTTP_HOST", "0.0.0.0"),
            port=env_int("TRELLIS_HTTP_PORT", DEFAULT_HTTP_PORT),
            upstreams={name: peer_address(name) for name in DEFAULT_PORTS},
            health_timeout_s=env_float("TRELLIS_HEALTH_TIMEOUT_S", 1.0),
        )
