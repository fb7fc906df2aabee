"""Redis key layout. Every key starts with the tenant, so one tenant can never address another's data.

Every id that goes into a key is checked here, once: an id with a `:` (or any other odd character) could
otherwise name another record's key, e.g. session "abc:messages" is the message list of session "abc".

Hash tags (the part in braces decides a key's Redis Cluster slot): the keys of one run share `{<run id>}`, the
keys of one session `{<session id>}`, and a tenant's agents, versions, their indexes and MCP servers
`{<tenant>}`. Every Lua script and MULTI/EXEC touches the keys of one tag only, so they run on Redis Cluster as
on a single Redis; what spans tags (a run's start claims its session, a run's end frees it) is separate
commands in one pipeline. `ACTIVE_RUNS` is one key of its own, only ever used alone."""

from __future__ import annotations

import re

from services.common.errors import InvalidArgument

_ID = re.compile(r"[A-Za-z0-9_.@-]{1,128}")


def _id(value: str, what: str, *, allow_empty: bool = False) -> str:
    if not (value == "" and allow_empty) and not _ID.fullmatch(value):
        raise InvalidArgument(f"invalid {what} {value!r}: use 1-128 letters, digits, '_', '-', '.' or '@'")
    return value


def _tenant(tenant: str) -> str:
    """The prefix of a tenant's own records, tagged with the tenant (one slot for its agents and indexes)."""
    return f"t:{{{_id(tenant, 'tenant id')}}}"


def agent(tenant: str, agent_id: str) -> str:
    return f"{_tenant(tenant)}:agent:{_id(agent_id, 'agent id')}"


AGENT_CHANGES_PREFIX = "changes:"


def agent_changes(tenant: str, agent_id: str) -> str:
    """A counter every change of what the agent runs increments (its draft, its versions, its deletion), in the
    same transaction. Outside the tenant's `t:` keys on purpose: orchestrators track this prefix alone
    (store/agent_cache.py), so the keys a run writes under `t:` never reach them."""
    return f"{AGENT_CHANGES_PREFIX}{agent(tenant, agent_id)}"


def agents_by_update(tenant: str) -> str:
    return f"{_tenant(tenant)}:agents:by_update"


def agents_by_create(tenant: str) -> str:
    return f"{_tenant(tenant)}:agents:by_create"


def agent_titles(tenant: str) -> str:
    return f"{_tenant(tenant)}:agents:titles"


def mcp_server(tenant: str, mcp_id: str) -> str:
    return f"{_tenant(tenant)}:mcp:{_id(mcp_id, 'MCP server id')}"


def mcp_servers_by_create(tenant: str) -> str:
    return f"{_tenant(tenant)}:mcps:by_create"


def mcp_server_names(tenant: str) -> str:
    return f"{_tenant(tenant)}:mcps:names"


def versions(tenant: str, agent_id: str) -> str:
    return f"{agent(tenant, agent_id)}:versions"


def version(tenant: str, version_id: str) -> str:
    return f"{_tenant(tenant)}:version:{_id(version_id, 'version id')}"


def session(tenant: str, session_id: str) -> str:
    return f"t:{_id(tenant, 'tenant id')}:session:{{{_id(session_id, 'session id')}}}"


def session_messages(tenant: str, session_id: str) -> str:
    return f"{session(tenant, session_id)}:messages"


def _agent_scope(tenant: str, agent_id: str) -> str:
    """Sessions of inline-DSL runs have no agent (""): they share one index per tenant."""
    return f"{_tenant(tenant)}:agent:{_id(agent_id, 'agent id', allow_empty=True)}"


def agent_sessions(tenant: str, agent_id: str) -> str:
    return f"{_agent_scope(tenant, agent_id)}:sessions"


def user_sessions(tenant: str, agent_id: str, user_id: str) -> str:
    # user ids are the caller's own strings (e-mail addresses, ...): only the key separator is refused
    if ":" in user_id:
        raise InvalidArgument(f"invalid user id {user_id!r}: it must not contain ':'")
    return f"{_agent_scope(tenant, agent_id)}:user:{user_id}:sessions"


def run(tenant: str, run_id: str) -> str:
    return f"t:{_id(tenant, 'tenant id')}:run:{{{_id(run_id, 'run id')}}}"


def run_log(tenant: str, run_id: str, kind: str) -> str:
    return f"{run(tenant, run_id)}:{kind}"


def run_events(tenant: str, run_id: str) -> str:
    """The run's event stream (Redis stream, entry ids `0-<seq>`): clients rejoin from it."""
    return f"{run(tenant, run_id)}:events"


def run_checkpoint(tenant: str, run_id: str) -> str:
    """The run's checkpoint: one JSON record per finished or pruned component, in order."""
    return f"{run(tenant, run_id)}:checkpoint"


def session_runs(tenant: str, session_id: str) -> str:
    return f"{session(tenant, session_id)}:runs"


def run_lease(run_id: str) -> str:
    # Not tenant-scoped, like the cancel flag: the replica id holding the run, expiring unless renewed.
    return f"run:{{{_id(run_id, 'run id')}}}:lease"


# Runs that are running, scored by when their lease runs out; members are "<tenant>/<run id>".
ACTIVE_RUNS = "trellis:runs:active"
# Runs waiting for the user whose wait expires (a UserFillUp's `timeout_s`), scored by when; members
# "<tenant>/<run id>". Like ACTIVE_RUNS, one key of its own, only ever used alone.
PAUSED_RUNS = "trellis:runs:paused"


def session_active_run(tenant: str, session_id: str) -> str:
    return f"{session(tenant, session_id)}:active_run"


def cancel_flag(run_id: str) -> str:
    # Not tenant-scoped: run ids are unguessable uuids and replicas check the flag without a tenant at hand.
    return f"run:{{{_id(run_id, 'run id')}}}:cancel"


CANCEL_CHANNEL = "trellis:cancel"


def attachment(tenant: str, attachment_id: str) -> str:
    """A file a run produced (attachments.py): a hash of its name, type, bytes and run, with a TTL."""
    return f"t:{_id(tenant, 'tenant id')}:attachment:{_id(attachment_id, 'attachment id')}"


# ---- triggers: schedules and completion webhooks (services/orchestrator/triggers/) ------------------------

def schedule(tenant: str, schedule_id: str) -> str:
    """A schedule (store/schedules.py): a hash of its settings and its next tick, tagged with the tenant."""
    return f"{_tenant(tenant)}:schedule:{_id(schedule_id, 'schedule id')}"


def schedule_tick(tenant: str, schedule_id: str, tick: int) -> str:
    """The claim of one tick of a schedule: the one replica that set it fires that tick."""
    return f"{schedule(tenant, schedule_id)}:tick:{int(tick)}"


def agent_schedules(tenant: str, agent_id: str) -> str:
    return f"{agent(tenant, agent_id)}:schedules"


# Schedules scored by when they are next due (clock of the scheduler); members "<tenant>/<schedule id>".
SCHEDULES_DUE = "trellis:schedules:due"


def agent_webhook(tenant: str, agent_id: str) -> str:
    """The agent's completion webhook (JSON), tagged with the tenant."""
    return f"{agent(tenant, agent_id)}:webhook"


def run_deliveries(tenant: str, run_id: str) -> str:
    """A run's completion webhook deliveries (hash: delivery id -> JSON with its attempts), beside the run."""
    return f"{run(tenant, run_id)}:deliveries"


# Runs that ended and may have webhooks to notify, scored by when; members "<tenant>/<run id>/<status>".
WEBHOOK_NOTICES = "trellis:webhooks:notices"
# Deliveries scored by their next attempt; members "<tenant>/<run id>/<delivery id>".
WEBHOOK_DUE = "trellis:webhooks:due"


# ---- limits per tenant (store/limits.py, docs/limits.md) ----------------------------------------------------

def limit_leases(tenant: str, kind: str, scope: str) -> str:
    """The replicas' leases of a scope's slots (`kind` runs or streams): a hash, replica -> "<held>:<expiry ms>",
    tagged with the tenant (every scope of a tenant leased in one script)."""
    return f"{_tenant(tenant)}:limits:{_id(kind, 'limit kind')}:{_id(scope, 'limit scope')}"


def limit_window(tenant: str, what: str, scope: str) -> str:
    """The identifier of a scope's moving window (`what` starts or tokens) in the `limits` package, which keeps
    it under its own prefix; its key keeps the tenant's tag."""
    return f"{_tenant(tenant)}:limits:{_id(what, 'limit kind')}:{_id(scope, 'limit scope')}"


def tenant_admission(tenant: str) -> str:
    """The tenant's admission figures as each replica last wrote them (store/admission.py): a hash, replica ->
    "<expiry ms>|<figures JSON>", tagged with the tenant."""
    return f"{_tenant(tenant)}:limits:admission"
