"""Durable state in Redis: agents and their published versions, sessions, runs. Every key is tenant-scoped."""

from services.orchestrator.store.agents import AgentRecord, AgentStore, VersionRecord
from services.orchestrator.store.runs import RunStore
from services.orchestrator.store.sessions import SessionRecord, SessionStore

__all__ = ["AgentRecord", "AgentStore", "RunStore", "SessionRecord", "SessionStore", "VersionRecord"]
