"""Gateway settings, read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from services.common.config import (
    DEFAULT_HTTP_PORT,
    DEFAULT_PORTS,
    data_dir,
    env_bool,
    env_float,
    env_int,
    env_str,
    peer_address,
)

API_KEY_FILE = "api_key"  # under TRELLIS_DATA_DIR: the key `trellis up` prints when TRELLIS_API_KEYS is unset


def parse_api_keys(raw: str) -> dict[str, str]:
    """`key:tenant,key2:tenant2` -> {key: tenant}. A key without `:tenant` belongs to tenant "default"."""
    keys: dict[str, str] = {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        key, sep, tenant = entry.rpartition(":")
        if not sep:
            key, tenant = entry, "default"
        key, tenant = key.strip(), tenant.strip()
        if not key or not tenant:
            raise SystemExit(f"configuration error: TRELLIS_API_KEYS entry {entry!r} is not `key:tenant`")
        keys[key] = tenant
    return keys


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "0.0.0.0"  # TRELLIS_HTTP_HOST: bind address
    port: int = DEFAULT_HTTP_PORT  # TRELLIS_HTTP_PORT
    # service name -> gRPC address (TRELLIS_<SERVICE>_ADDR, peer_address in services/common/config.py)
    upstreams: dict[str, str] = field(default_factory=dict)
    health_timeout_s: float = 1.0  # TRELLIS_HEALTH_TIMEOUT_S: per upstream health check in /healthz
    # TRELLIS_API_KEYS (`key:tenant,...`). Empty: the key in `api_key_file` (created at start-up) for "default".
    api_keys: dict[str, str] = field(default_factory=dict)
    api_key_file: str = ""  # "" and no api_keys: every request is refused (fail closed)
    max_body_bytes: int = 16 * 1024 * 1024  # TRELLIS_MAX_BODY_BYTES: larger request bodies get 413
    rpc_timeout_s: float = 10.0  # TRELLIS_RPC_TIMEOUT_S: every unary call to the orchestrator and retrieval
    ingest_timeout_s: float = 900.0  # TRELLIS_INGEST_TIMEOUT_S: one upload, parsed, chunked and embedded
    run_timeout_s: float = 900.0  # TRELLIS_RUN_TIMEOUT_S: the longest a run stream may last
    # TRELLIS_RUN_LEASE_S: the orchestrator's run lease (the same variable). A rejoin that meets a replica going
    # away waits about two of them for the run's new owner before it answers "unavailable".
    run_lease_s: float = 10.0
    # TRELLIS_HTTP_REUSE_PORT=1 (set by `trellis up` when it starts several gateways): share the port with
    # SO_REUSEPORT, the kernel spreading connections over the processes.
    reuse_port: bool = False
    # TRELLIS_A2A_PUSH_PRIVATE_HOSTS=1: A2A push notifications may go to loopback and private addresses (tests, a
    # receiver inside the cluster). Default: only public hosts, so a push URL cannot reach internal services.
    a2a_push_private_hosts: bool = False

    @classmethod
    def from_env(cls) -> "GatewayConfig":
        api_keys = parse_api_keys(env_str("TRELLIS_API_KEYS", ""))
        return cls(
            host=env_str("TRELLIS_HTTP_HOST", cls.host),
            port=env_int("TRELLIS_HTTP_PORT", cls.port),
            upstreams={name: peer_address(name) for name in DEFAULT_PORTS},
            health_timeout_s=env_float("TRELLIS_HEALTH_TIMEOUT_S", cls.health_timeout_s),
            api_keys=api_keys,
            api_key_file="" if api_keys else str(data_dir() / API_KEY_FILE),
            max_body_bytes=env_int("TRELLIS_MAX_BODY_BYTES", cls.max_body_bytes),
            rpc_timeout_s=env_float("TRELLIS_RPC_TIMEOUT_S", cls.rpc_timeout_s),
            ingest_timeout_s=env_float("TRELLIS_INGEST_TIMEOUT_S", cls.ingest_timeout_s),
            run_timeout_s=env_float("TRELLIS_RUN_TIMEOUT_S", cls.run_timeout_s),
            run_lease_s=env_float("TRELLIS_RUN_LEASE_S", cls.run_lease_s),
            reuse_port=env_bool("TRELLIS_HTTP_REUSE_PORT", cls.reuse_port),
            a2a_push_private_hosts=env_bool("TRELLIS_A2A_PUSH_PRIVATE_HOSTS", cls.a2a_push_private_hosts),
        )


CONFIG = web.AppKey("config", GatewayConfig)  # the app's settings (gateway/app.py sets it)
