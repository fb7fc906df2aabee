"""What can be asked of runs: a run's record, its trace, a session's runs, and its stored stream to rejoin."""

from __future__ import annotations

from dataclasses import replace
from typing import AsyncIterator

from services.common.errors import NotFound
from services.orchestrator.engine import events as ev
from services.orchestrator.runs.stream import EventCodec, Numbered
from services.orchestrator.store import RunStore, SessionStore
from services.orchestrator.store.journal import read_checkpoint


class RunQueries:
    def __init__(self, sessions: SessionStore, runs: RunStore, codec: EventCodec) -> None:
        self.sessions = sessions
        self.runs = runs
        self.codec = codec

    async def info(self, tenant: str, run_id: str, agent_id: str = "") -> dict[str, str]:
        """A run's record, of this tenant (and of `agent_id`, when given)."""
        info = await self.runs.status(tenant, run_id)
        if not info or (agent_id and info.get("agent_id") != agent_id):
            raise NotFound(f"run {run_id!r} not found" + (f" for agent {agent_id!r}" if agent_id else ""))
        return info

    async def run_log(self, tenant: str, run_id: str,
                      agent_id: str = "") -> tuple[dict[str, str], list[dict], list[dict]]:
        """(status record, tool calls, thoughts) of a run."""
        info = await self.info(tenant, run_id, agent_id)
        return (info, await self.runs.read_log(tenant, run_id, "tool_calls"),
                await self.runs.read_log(tenant, run_id, "thoughts"))

    async def get_run(self, tenant: str, run_id: str, agent_id: str = "") -> tuple[dict[str, str], list[str]]:
        """A run's record and the top-level components it finished so far."""
        info = await self.info(tenant, run_id, agent_id)
        records = await read_checkpoint(self.runs.redis, tenant, run_id)
        return info, [r["n"] for r in records if not r.get("p") and not r.get("s")]

    async def list_runs(self, tenant: str, session_id: str, agent_id: str = "") -> list[tuple[str, dict[str, str]]]:
        record = await self.sessions.get(tenant, session_id)
        if agent_id and record.agent_id != agent_id:
            raise NotFound(f"session {session_id!r} not found for agent {agent_id!r}")
        return await self.runs.list_for_session(tenant, session_id)

    async def watch(self, tenant: str, run_id: str, after_seq: int = 0) -> AsyncIterator[bytes]:
        """The run's stored events after `after_seq` (as its journal stores them), then its live tail; it ends
        when the run ended and nothing is left to send (the caller stops at the run's last event).

        A rejoin whose next stored event is not `after_seq + 1` lands past a take-over's gap (runs/resume.py),
        and may have seen events its old owner gave it but never stored (it died first). A component of those
        that the new owner runs again would show twice, so each component's first NodeStarted after the gap
        says `restarted` (a client drops what it has of it; one it never saw loses nothing)."""
        await self.info(tenant, run_id)
        past_gap: set[str] | None = None  # the components flagged so far, once the rejoin is past a gap
        first = True
        async for seq, fields in self.runs.follow(tenant, run_id, after_seq):
            data = fields[b"e"]
            if first:
                first = False
                past_gap = set() if after_seq and seq > after_seq + 1 else None
            node = fields.get(b"k")
            if past_gap is not None and node and node not in past_gap and fields.get(b"f") != b"1":
                event = self.codec.decode(data)
                if event.__class__ is ev.NodeStarted:
                    past_gap.add(node)
                    if not event.restarted:
                        data = self.codec.encode(Numbered(seq, replace(event, restarted=True)))
            yield data
