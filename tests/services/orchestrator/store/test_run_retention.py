"""How long a run is kept (TRELLIS_RUN_TTL_S) against a real Redis: every key a run writes (record, stream,
checkpoint, trace, its session's index of runs) expires after the configured time, renewed by each write; a
retention too short to rejoin a run stops start-up naming the variable."""

from __future__ import annotations

import uuid

import pytest

from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.store import RunStore, SessionStore, keys
from services.orchestrator.store.journal import JournalWriter, RunJournal
from services.orchestrator.store.runs import RUN_TTL_S


async def test_every_key_of_a_run_expires_after_the_configured_retention(redis_client):
    tenant, run = "t1", f"run-{uuid.uuid4().hex[:8]}"
    session = (await SessionStore(redis_client).create(tenant, agent_id="agent-1")).id
    runs = RunStore(redis_client, owner="a", lease_s=30, ttl_s=120)
    assert not await runs.start(tenant, run, session, "agent-1")
    journal = RunJournal(JournalWriter(redis_client, ttl_s=runs.ttl_s), tenant, run)
    journal.event(1, b"e1", "n1", record={"n": "n1"})
    await journal.aclose()
    async with redis_client.pipeline(transaction=False) as pipe:
        runs.queue_finish(pipe, tenant, run, session, status="succeeded", epoch=1,
                          tool_calls=[{"tool": "t"}], thoughts=[{"thought": "x"}])
        await pipe.execute()
    run_keys = [keys.run(tenant, run), keys.run_events(tenant, run), keys.run_checkpoint(tenant, run),
                keys.run_log(tenant, run, "tool_calls"), keys.run_log(tenant, run, "thoughts"),
                keys.session_runs(tenant, session)]
    ttls = [await redis_client.ttl(key) for key in run_keys]
    assert all(60 < ttl <= 120 for ttl in ttls), dict(zip(run_keys, ttls))
    # The default keeps a run for a week.
    default = RunStore(redis_client, owner="a")
    assert default.ttl_s == RUN_TTL_S == 7 * 24 * 3600


def test_a_retention_too_short_to_rejoin_a_run_stops_start_up(monkeypatch):
    monkeypatch.setenv("TRELLIS_RUN_TTL_S", "30")
    with pytest.raises(SystemExit, match="TRELLIS_RUN_TTL_S=30 is below 60 seconds"):
        OrchestratorConfig.from_env()
    monkeypatch.setenv("TRELLIS_RUN_TTL_S", "3600")
    assert OrchestratorConfig.from_env().run_ttl_s == 3600
