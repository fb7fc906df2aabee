"""Orchestrator settings, read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import DEFAULT_PORTS, ServerConfig, env_bool, env_float, env_int, env_str, peer_address
from services.orchestrator.engine_settings import EngineSettings


def _engine_from_env() -> EngineSettings:
    defaults = EngineSettings()
    timeout = env_float("TRELLIS_COMPONENT_TIMEOUT_S", defaults.default_timeout_s or 0.0)
    allow = env_str("TRELLIS_SSRF_ALLOWLIST", "")
    return EngineSettings(
        # TRELLIS_COMPONENT_TIMEOUT_S: per-component limit (Agent gets twice as long); 0 disables it
        default_timeout_s=timeout or None,
        component_timeouts={"Agent": timeout * 2 if timeout else None},
        # TRELLIS_ITERATION_CONCURRENCY: Iteration items run at the same time
        iteration_concurrency=env_int("TRELLIS_ITERATION_CONCURRENCY", defaults.iteration_concurrency),
        # TRELLIS_MAX_STEPS: component executions per run before it is stopped as runaway
        max_steps=env_int("TRELLIS_MAX_STEPS", defaults.max_steps),
        # TRELLIS_SSRF_ALLOWLIST: comma-separated hosts/CIDRs that Invoke and tools may reach despite the guard
        ssrf_allowlist=tuple(x.strip() for x in allow.split(",") if x.strip()),
        # TRELLIS_EXESQL_TIMEOUT_S: an ExeSQL statement's time limit; TRELLIS_EXESQL_SQLITE_DIR: where SQLite files may be
        sql_timeout_s=env_float("TRELLIS_EXESQL_TIMEOUT_S", defaults.sql_timeout_s),
        sql_sqlite_dir=env_str("TRELLIS_EXESQL_SQLITE_DIR", "") or None,
        # TRELLIS_MCP_TIMEOUT_S: one MCP tool call's default limit; TRELLIS_MCP_ALLOW_STDIO=1 allows stdio servers
        mcp_timeout_s=env_float("TRELLIS_MCP_TIMEOUT_S", defaults.mcp_timeout_s),
        mcp_allow_stdio=env_bool("TRELLIS_MCP_ALLOW_STDIO", False),
    )


@dataclass(frozen=True)
class OrchestratorConfig:
    server: ServerConfig
    engine: EngineSettings
    redis_url: str  # TRELLIS_REDIS_URL: where agents, sessions and runs live (trellis up sets it)
    llm_gateway_addr: str  # TRELLIS_LLM_GATEWAY_ADDR
    retrieval_addr: str  # TRELLIS_RETRIEVAL_ADDR
    sandbox_addr: str  # TRELLIS_SANDBOX_ADDR
    session_ttl_s: int = 30 * 24 * 3600  # TRELLIS_SESSION_TTL_S: an unused session expires (0: never)
    # TRELLIS_RUN_LEASE_S: a replica owns a run through a lease this long, renewed every third of it; when
    # the owner dies, another replica resumes the run within about two leases
    run_lease_s: float = 10.0
    # TRELLIS_RUN_MAX_ATTEMPTS: a run resumed after this many crashes is failed instead
    run_max_attempts: int = 3

    @classmethod
    def from_env(cls) -> "OrchestratorConfig":
        port, metrics_port = DEFAULT_PORTS["orchestrator"]
        return cls(
            server=ServerConfig.from_env("orchestrator", port, metrics_port),
            engine=_engine_from_env(),
            redis_url=env_str("TRELLIS_REDIS_URL", "redis://127.0.0.1:6379/0"),
            llm_gateway_addr=peer_address("llm_gateway"),
            retrieval_addr=peer_address("retrieval"),
            sandbox_addr=peer_address("sandbox"),
            session_ttl_s=env_int("TRELLIS_SESSION_TTL_S", 30 * 24 * 3600),
            run_lease_s=env_float("TRELLIS_RUN_LEASE_S", 10.0),
            run_max_attempts=env_int("TRELLIS_RUN_MAX_ATTEMPTS", 3),
        )
