"""Orchestrator settings, read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.speed_policies import DEFAULT_JOURNAL_POLICY, journal_policy
from services.common.config import ServerConfig, env_bool, env_float, env_int, env_str, peer_address
from services.orchestrator.engine.settings import EngineSettings
from services.orchestrator.store.attachments import DEFAULT_MAX_BYTES, DEFAULT_TTL_S
from services.orchestrator.store.redis_target import RedisTarget, TlsFiles, parse
from services.orchestrator.store.runs import RUN_TTL_S
from services.orchestrator.triggers.settings import TriggerSettings


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
        mcp_allow_stdio=env_bool("TRELLIS_MCP_ALLOW_STDIO", defaults.mcp_allow_stdio),
        # TRELLIS_BROWSER_MAX_DOWNLOAD_BYTES: the largest response or download a Browser page may receive
        browser_max_download_bytes=env_int("TRELLIS_BROWSER_MAX_DOWNLOAD_BYTES", defaults.browser_max_download_bytes),
    )


@dataclass(frozen=True)
class OrchestratorConfig:
    # Fields without a default come from shared settings: from_env reads them with ServerConfig.from_env
    # and peer_address (services/common/config.py), which hold their defaults.
    server: ServerConfig  # TRELLIS_ORCHESTRATOR_PORT (50051), TRELLIS_ORCHESTRATOR_METRICS_PORT (9091)
    engine: EngineSettings  # TRELLIS_COMPONENT_TIMEOUT_S, TRELLIS_MAX_STEPS, ... (_engine_from_env above)
    llm_gateway_addr: str  # TRELLIS_LLM_GATEWAY_ADDR
    retrieval_addr: str  # TRELLIS_RETRIEVAL_ADDR
    sandbox_addr: str  # TRELLIS_SANDBOX_ADDR
    # TRELLIS_REDIS_URL: where agents, sessions and runs live (trellis up sets it): one Redis, a Redis Cluster
    # (redis+cluster://host:port,host:port) or Sentinel's primary (redis+sentinel://host:port,.../<name>),
    # rediss... over TLS (store/redis_target.py, docs/redis.md)
    redis_url: str = "redis://127.0.0.1:6379/0"
    # TRELLIS_REDIS_TLS_CA, TRELLIS_REDIS_TLS_CERT, TRELLIS_REDIS_TLS_KEY: PEM files for a rediss URL (the CA to
    # trust instead of the system's; a client certificate and its key when Redis asks for one)
    redis_tls: TlsFiles = TlsFiles()
    session_ttl_s: int = 30 * 24 * 3600  # TRELLIS_SESSION_TTL_S: an unused session expires (0: never)
    # TRELLIS_RUN_TTL_S: a run (record, stream, checkpoint, trace) is kept this long after its last write
    run_ttl_s: int = RUN_TTL_S
    # TRELLIS_RUN_LEASE_S: a replica owns a run through a lease this long, renewed every third of it; when
    # the owner dies, another replica resumes the run within about two leases
    run_lease_s: float = 10.0
    # TRELLIS_RUN_MAX_ATTEMPTS: a run resumed after this many crashes is failed instead
    run_max_attempts: int = 3
    # TRELLIS_JOURNAL_POLICY: when runs' journals are written, `at_once` or `batched` (services/common/speed_policies.py)
    journal_policy: str = DEFAULT_JOURNAL_POLICY
    attachment_ttl_s: float = DEFAULT_TTL_S  # TRELLIS_ATTACHMENT_TTL_S: a file a run produced stays this long
    attachment_max_bytes: int = DEFAULT_MAX_BYTES  # TRELLIS_ATTACHMENT_MAX_BYTES: larger files are refused
    # TRELLIS_SCHEDULER_*, TRELLIS_WEBHOOK_*: schedules and completion webhooks (triggers/settings.py)
    triggers: TriggerSettings = field(default_factory=TriggerSettings)
    # TRELLIS_LIMITS_FILE: the limits per tenant and this replica's capacity (YAML, docs/limits.md), read again
    # when it changes; none: no limits (every tenant unlimited, no queue)
    limits_file: str = ""

    @property
    def redis(self) -> RedisTarget:
        """What redis_url and redis_tls say to connect to (ValueError naming the problem)."""
        return parse(self.redis_url, self.redis_tls)

    @classmethod
    def from_env(cls) -> "OrchestratorConfig":
        cfg = cls._from_env()
        try:
            cfg.redis  # a URL Redis cannot be reached by stops start-up with a line saying why
        except ValueError as exc:
            raise SystemExit(f"configuration error: {exc}") from None
        if cfg.run_ttl_s < 60:  # a run must outlive its rejoins and its webhook deliveries' first tries
            raise SystemExit(f"configuration error: TRELLIS_RUN_TTL_S={cfg.run_ttl_s} is below 60 seconds")
        return cfg

    @classmethod
    def _from_env(cls) -> "OrchestratorConfig":
        return cls(
            server=ServerConfig.from_env("orchestrator"),
            engine=_engine_from_env(),
            redis_url=env_str("TRELLIS_REDIS_URL", cls.redis_url),
            redis_tls=TlsFiles(ca=env_str("TRELLIS_REDIS_TLS_CA", ""), cert=env_str("TRELLIS_REDIS_TLS_CERT", ""),
                               key=env_str("TRELLIS_REDIS_TLS_KEY", "")),
            llm_gateway_addr=peer_address("llm_gateway"),
            retrieval_addr=peer_address("retrieval"),
            sandbox_addr=peer_address("sandbox"),
            session_ttl_s=env_int("TRELLIS_SESSION_TTL_S", cls.session_ttl_s),
            run_ttl_s=env_int("TRELLIS_RUN_TTL_S", cls.run_ttl_s),
            run_lease_s=env_float("TRELLIS_RUN_LEASE_S", cls.run_lease_s),
            run_max_attempts=env_int("TRELLIS_RUN_MAX_ATTEMPTS", cls.run_max_attempts),
            journal_policy=journal_policy().name,  # an unknown name stops start-up, naming the known ones
            attachment_ttl_s=env_float("TRELLIS_ATTACHMENT_TTL_S", cls.attachment_ttl_s),
            attachment_max_bytes=env_int("TRELLIS_ATTACHMENT_MAX_BYTES", cls.attachment_max_bytes),
            triggers=TriggerSettings.from_env(),
            limits_file=env_str("TRELLIS_LIMITS_FILE", cls.limits_file),
        )
