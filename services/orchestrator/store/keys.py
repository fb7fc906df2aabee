"""Redis key layout. Every key starts with the tenant, so one tenant can never address another's data."""

from __future__ import annotations


def agent(tenant: str, agent_id: str) -> str:
    return f"t:{tenant}:agent:{agent_id}"


def agents_by_update(tenant: str) -> str:
    return f"t:{tenant}:agents:by_update"


def agents_by_create(tenant: str) -> str:
    return f"t:{tenant}:agents:by_create"


def agent_titles(tenant: str) -> str:
    return f"t:{tenant}:agents:titles"


def versions(tenant: str, agent_id: str) -> str:
    return f"t:{tenant}:agent:{agent_id}:versions"


def version(tenant: str, version_id: str) -> str:
    return f"t:{tenant}:version:{version_id}"


def session(tenant: str, session_id: str) -> str:
    return f"t:{tenant}:session:{session_id}"


def session_messages(tenant: str, session_id: str) -> str:
    return f"t:{tenant}:session:{session_id}:messages"


def agent_sessions(tenant: str, agent_id: str) -> str:
    return f"t:{tenant}:agent:{agent_id}:sessions"


def user_sessions(tenant: str, agent_id: str, user_id: str) -> str:
    return f"t:{tenant}:agent:{agent_id}:user:{user_id}:sessions"


def run(tenant: str, run_id: str) -> str:
    return f"t:{tenant}:run:{run_id}"


def run_log(tenant: str, run_id: str, kind: str) -> str:
    return f"t:{tenant}:run:{run_id}:{kind}"


def session_active_run(tenant: str, session_id: str) -> str:
    return f"t:{tenant}:session:{session_id}:active_run"


def cancel_flag(run_id: str) -> str:
    # Not tenant-scoped: run ids are unguessable uuids and replicas check the flag without a tenant at hand.
    return f"run:{run_id}:cancel"


CANCEL_CHANNEL = "trellis:cancel"
