"""Settings every gRPC service shares, read once from the environment (TRELLIS_* only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from services.common.speed_policies import DEFAULT_GC_POLICY, GC_POLICIES, GcPolicy, gc_policy

P = TypeVar("P")


def env_str(name: str, default: str) -> str:
    """One place that reads TRELLIS_* variables, so every setting is documented where it is read."""
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"configuration error: {name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"configuration error: {name}={raw!r} is not a number") from None


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_policy(choose: Callable[[], P]) -> P:
    """A speed policy chosen by its variable (services/common/speed_policies.py); an unknown name stops start-up
    with a line naming the known ones."""
    try:
        return choose()
    except ValueError as exc:
        raise SystemExit(f"configuration error: {exc}") from None


def data_dir() -> Path:
    """TRELLIS_DATA_DIR: where local state lives (Redis AOF, SQLite, API keys). Default ./.trellis."""
    return Path(env_str("TRELLIS_DATA_DIR", ".trellis")).resolve()


@dataclass(frozen=True)
class ServerConfig:
    """Where and how a gRPC service listens."""

    name: str  # service name for logs and metrics, e.g. "orchestrator"
    host: str = "[::]"  # TRELLIS_HOST: bind address
    port: int = 0  # TRELLIS_<NAME>_PORT: gRPC port (from_env: the service's port in DEFAULT_PORTS)
    metrics_port: int = 0  # TRELLIS_<NAME>_METRICS_PORT: Prometheus /metrics; 0 disables the exporter
    grace_s: float = 10.0  # TRELLIS_GRACE_S: in-flight RPCs get this long to finish on SIGTERM
    drain_s: float = 0.5  # TRELLIS_DRAIN_S: NOT_SERVING is announced this long before the server stops
    # TRELLIS_GC_POLICY: the garbage collector once started, `frozen_startup` or `default` (speed_policies.py)
    gc_policy: GcPolicy = GC_POLICIES[DEFAULT_GC_POLICY]

    @classmethod
    def from_env(cls, name: str) -> "ServerConfig":
        key = name.upper()
        port, metrics_port = DEFAULT_PORTS[name]
        return cls(
            name=name,
            host=env_str("TRELLIS_HOST", cls.host),
            port=env_int(f"TRELLIS_{key}_PORT", port),
            metrics_port=env_int(f"TRELLIS_{key}_METRICS_PORT", metrics_port),
            grace_s=env_float("TRELLIS_GRACE_S", cls.grace_s),
            drain_s=env_float("TRELLIS_DRAIN_S", cls.drain_s),
            gc_policy=env_policy(gc_policy),
        )

    @classmethod
    def for_tests(cls, name: str) -> "ServerConfig":
        """Loopback, a port the OS picks, no metrics exporter, a quick stop."""
        return cls(name, "127.0.0.1", 0, 0, grace_s=1.0, drain_s=0.0)


# Default ports (the README's configuration table). Metrics ports are ours: 9091.. one per gRPC service.
DEFAULT_PORTS = {
    "orchestrator": (50051, 9091),
    "llm_gateway": (50052, 9092),
    "retrieval": (50053, 9093),
    "sandbox": (50054, 9094),
}
DEFAULT_HTTP_PORT = 8080


def peer_address(service: str) -> str:
    """TRELLIS_<SERVICE>_ADDR, or localhost on that service's port (TRELLIS_<SERVICE>_PORT)."""
    key = service.upper()
    port = env_int(f"TRELLIS_{key}_PORT", DEFAULT_PORTS[service][0])
    return env_str(f"TRELLIS_{key}_ADDR", f"127.0.0.1:{port}")
