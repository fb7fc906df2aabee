"""Engine knobs (timeouts, concurrency, guards) and the outbound clients handed to components.

The lead's `config.py` builds `EngineSettings` from the environment; the engine itself never reads
`os.environ`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping, Protocol

from services.clients import LlmClient, RetrievalClient, SandboxClient

if TYPE_CHECKING:
    from services.orchestrator.engine.events import Event


@dataclass(frozen=True, slots=True)
class EngineSettings:
    # Per-component time limit in seconds (None = no limit). RAGFlow's reference defaults are 600 s
    # for every component and 1200 s for Agent (`COMPONENT_EXEC_TIMEOUT`, enforced only when
    # ENABLE_TIMEOUT_ASSERTION is set). Its 3 s for Switch/Invoke/VariableAggregator is not copied:
    # it would cut Invoke's own 60 s HTTP timeout short.
    default_timeout_s: float | None = 600.0
    # Overrides by component_name, e.g. {"Agent": 1200.0}.
    component_timeouts: Mapping[str, float | None] = field(
        default_factory=lambda: {"Agent": 1200.0})
    # How many Iteration items run at the same time (results are still returned in item order).
    iteration_concurrency: int = 4
    # Guard against runaway graphs: component executions per run (Loop passes included).
    max_steps: int = 10_000
    # Upper bound on a Loop's `maximum_loop_count` (the DSL value is used when smaller).
    max_loop_count: int = 1_000
    # Outbound HTTP (Invoke, tools): hosts or CIDRs allowed past the SSRF guard, which otherwise
    # refuses private, loopback and link-local addresses.
    ssrf_allowlist: tuple[str, ...] = ()
    # Cap on `delay_after_error` between retries, so a bad DSL value cannot park a run for hours.
    max_retry_delay_s: float = 60.0
    # ExeSQL: a statement's time limit on the database server (and the client's wait for it).
    sql_timeout_s: float = 30.0
    # ExeSQL db_type "sqlite": database files are opened read-only, and only under this directory
    # (None: SQLite is refused, since a path could name any file the orchestrator can read).
    sql_sqlite_dir: str | None = None
    # MCP tool calls: the time limit of one call when the server's record sets none.
    mcp_timeout_s: float = 60.0
    # MCP servers of type "stdio" start a local command: off unless a deployment allows it.
    mcp_allow_stdio: bool = False
    # Browser: the largest response, and so the largest download, a page may receive (bytes).
    browser_max_download_bytes: int = 32 * 1024 * 1024

    def timeout_for(self, component_name: str) -> float | None:
        if component_name in self.component_timeouts:
            return self.component_timeouts[component_name]
        return self.default_timeout_s


class ChildRuns(Protocol):
    """Runs another agent of the same tenant as a child run: an ordinary run of the orchestrator (its own run id
    and session, journaled, cancellable) whose record names its caller (runs/children.py). The child's answer
    events (RunStarted first, RunFinished last) are yielded; closing the iterator before its end cancels the
    child. An agent of another tenant is not found."""

    def run(self, *, tenant_id: str, agent_id: str, query: str, inputs: dict[str, Any], parent_run_id: str,
            session_id: str = "", user_id: str = "") -> AsyncIterator[Event]: ...


@dataclass(slots=True)
class Services:
    """What components may call out to. A client is None where the deployment (or a test) has no such peer."""

    settings: EngineSettings = field(default_factory=EngineSettings)
    llm: LlmClient | None = None  # the peer clients (services/clients/): components never see a stub
    retrieval: RetrievalClient | None = None
    sandbox: SandboxClient | None = None
    http: Any = None  # shared outbound HTTP client with the SSRF guard (http_client.py)
    mcp_servers: Any = None  # the tenants' MCP servers (store/mcp_servers.py), for Agents' `mcp` tools
    attachments: Any = None  # files runs produce (attachments.py: DocGenerator, ExcelProcessor, Browser)
    children: ChildRuns | None = None  # other agents of the tenant run as child runs (AgentCall)
    # Told of every model call's LLM tokens as it ends: (tenant, run id, tokens); the tenant's limits count
    # them (services/orchestrator/limits/gate.py `charge_tokens`). Must not wait.
    tokens_used: Callable[[str, str, int], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
