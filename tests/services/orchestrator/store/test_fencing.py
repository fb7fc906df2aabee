"""Fencing against a real Redis: once another replica took a run over, every write of its old owner (journal,
end, turn, trace, session claim, lease, a resume's clean-up) is refused in the script that would make it, and
the new owner's go through; an owner late with its lease that nobody took over still writes (store/runs.py)."""

from __future__ import annotations

import uuid

import pytest

from services.orchestrator.engine.state import SessionState
from services.orchestrator.store import RunStore, SessionStore, keys, session_fence
from services.orchestrator.store.journal import (JournalWriter, RunJournal, RunLost, copy_checkpoint,
                                                 drop_unfinished, read_checkpoint, read_events)
from services.orchestrator.store.sessions import message


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def started(redis, tenant: str) -> tuple[RunStore, SessionStore, str, str]:
    """Replica "a" runs a new run on a new session (epoch 1)."""
    sessions = SessionStore(redis)
    session = (await sessions.create(tenant, agent_id="agent-1")).id
    run = f"run-{uuid.uuid4().hex[:8]}"
    mine = RunStore(redis, owner="a", lease_s=30)
    assert not await mine.start(tenant, run, session, "agent-1")
    return mine, sessions, session, run


async def taken_over(redis, tenant: str, run: str, session: str, owner: str) -> tuple[RunStore, int]:
    """`owner` takes the run over once its lease is gone (deleted: as if it ran out), and its session back."""
    await redis.delete(keys.run_lease(run))
    other = RunStore(redis, owner=owner, lease_s=30)
    epoch = await other.take_over(tenant, run)
    assert epoch is not None and await other.claim_session(tenant, session, run, epoch)
    return other, epoch


async def end(runs: RunStore, sessions: SessionStore, tenant: str, run: str, session: str, epoch: int,
              answer: str) -> tuple[int, int]:
    """The run's end as runs/ending.py sends it: (the turn's reply, the end's reply)."""
    async with runs.redis.pipeline(transaction=False) as pipe:
        sessions.queue_save_turn(pipe, tenant, session, [message("user", "q"), message("assistant", answer)],
                                 SessionState.fresh({}), run_id=run, epoch=epoch)
        place = runs.queue_finish(pipe, tenant, run, session, status="succeeded", epoch=epoch,
                                  tool_calls=[{"tool": answer}], thoughts=[{"thought": answer}])
        replies = await pipe.execute()
    return replies[0], replies[place]


async def contents(redis, tenant: str, session: str) -> list[str]:
    return [m["content"] for m in (await SessionStore(redis).get(tenant, session)).messages]


async def test_a_stale_owner_s_writes_are_refused_and_the_new_owner_s_go_through(redis_client, tenant):
    mine, sessions, session, run = await started(redis_client, tenant)
    lost: list[str] = []
    stale = RunJournal(JournalWriter(redis_client), tenant, run, epoch=1, on_lost=lambda: lost.append("lost"))
    stale.event(1, b"before", "n1")
    await stale.flush()

    other, epoch = await taken_over(redis_client, tenant, run, session, owner="b")
    assert epoch == 2
    assert (await redis_client.hget(keys.session(tenant, session), session_fence.FIELD)) == f"{run}:2".encode()

    stale.event(2, b"after", "n1", record={"n": "n1"})  # the old owner comes back and writes
    with pytest.raises(RunLost):
        await stale.flush()
    assert lost == ["lost"]
    assert [seq for seq, _ in await read_events(redis_client, tenant, run)] == [1]
    assert await read_checkpoint(redis_client, tenant, run) == []

    assert await end(mine, sessions, tenant, run, session, 1, "stale") == (-1, 0)  # neither turn nor end
    assert await contents(redis_client, tenant, session) == []
    info = await mine.status(tenant, run)
    assert info["status"] == "running" and info["owner"] == "b" and info["attempts"] == "2"
    assert await redis_client.get(keys.session_active_run(tenant, session)) == run.encode()  # still claimed
    assert await redis_client.get(keys.run_lease(run)) == b"b"
    assert await mine.read_log(tenant, run, "tool_calls") == []
    assert await mine.renew([(tenant, run, session, 1)]) == [False]
    assert not await mine.finish(tenant, run, session, status="failed", error="stale", epoch=1, notify=False)
    with pytest.raises(RunLost):
        await drop_unfinished(redis_client, tenant, run, 1)
    assert [seq for seq, _ in await read_events(redis_client, tenant, run)] == [1]  # its clean-up changed nothing
    assert not await mine.claim_session(tenant, session, run, 1)  # nor can it take the session back

    fresh = RunJournal(JournalWriter(redis_client), tenant, run, epoch=epoch)
    assert await drop_unfinished(redis_client, tenant, run, epoch) == (1, {"n1"})
    fresh.event(100_002, b"new owner", "n1", record={"n": "n1"})
    await fresh.aclose()
    assert await end(other, sessions, tenant, run, session, epoch, "answer") == (1, 1)
    assert await contents(redis_client, tenant, session) == ["q", "answer"]
    assert (await other.status(tenant, run))["status"] == "succeeded"
    assert not await redis_client.exists(keys.session_active_run(tenant, session))  # freed by its owner
    assert await other.read_log(tenant, run, "tool_calls") == [{"tool": "answer"}]
    assert [seq for seq, _ in await read_events(redis_client, tenant, run)] == [100_002]

    # Either end sent again (a lost reply, a stale owner late): nothing more is stored.
    assert await end(other, sessions, tenant, run, session, epoch, "answer") == (-1, 0)
    assert await end(mine, sessions, tenant, run, session, 1, "stale") == (-1, 0)
    assert await contents(redis_client, tenant, session) == ["q", "answer"]
    assert await other.read_log(tenant, run, "thoughts") == [{"thought": "answer"}]


async def test_an_owner_late_with_its_lease_still_writes_while_nobody_took_the_run_over(redis_client, tenant):
    mine, sessions, session, run = await started(redis_client, tenant)
    await redis_client.delete(keys.run_lease(run))  # its lease ran out; no replica's reaper came by yet
    journal = RunJournal(JournalWriter(redis_client), tenant, run, epoch=1)
    journal.event(1, b"late", "")
    await journal.aclose()
    assert [seq for seq, _ in await read_events(redis_client, tenant, run)] == [1]
    assert await end(mine, sessions, tenant, run, session, 1, "late but still its own") == (1, 1)
    assert await contents(redis_client, tenant, session) == ["q", "late but still its own"]
    assert await RunStore(redis_client, owner="b").take_over(tenant, run) is None  # ended: nothing to take


async def test_a_take_over_taken_over_again_finds_its_clean_up_and_its_session_refused(redis_client, tenant):
    _, _, session, run = await started(redis_client, tenant)
    _, second = await taken_over(redis_client, tenant, run, session, owner="b")
    third_owner, third = await taken_over(redis_client, tenant, run, session, owner="c")
    assert (second, third) == (2, 3)
    with pytest.raises(RunLost):
        await drop_unfinished(redis_client, tenant, run, second)
    assert (await third_owner.status(tenant, run))["resuming"] == "1"  # still the third owner's to clear
    assert not await RunStore(redis_client, owner="b").claim_session(tenant, session, run, second)
    assert await drop_unfinished(redis_client, tenant, run, third) == (0, set())
    assert (await third_owner.status(tenant, run))["resuming"] == ""


async def test_a_paused_run_s_answer_copies_its_checkpoint_once_and_only_for_its_owner(redis_client, tenant):
    parent = f"run-{uuid.uuid4().hex[:8]}"
    records = RunJournal(JournalWriter(redis_client), tenant, parent)
    records.event(1, b"e", "n1", record={"n": "n1"})
    await records.aclose()
    child = RunStore(redis_client, owner="a")
    child_run = f"run-{uuid.uuid4().hex[:8]}"
    await child.start(tenant, child_run, "")
    assert await copy_checkpoint(redis_client, tenant, parent, child_run, 1) == 1
    assert await copy_checkpoint(redis_client, tenant, parent, child_run, 1) == 1  # sent again: copied once
    assert await read_checkpoint(redis_client, tenant, child_run) == [{"n": "n1"}]
    other = RunStore(redis_client, owner="b")
    await redis_client.delete(keys.run_lease(child_run))
    assert await other.take_over(tenant, child_run) == 2
    with pytest.raises(RunLost):
        await copy_checkpoint(redis_client, tenant, parent, child_run, 1)


async def test_a_lease_that_ran_out_with_no_take_over_is_renewed_and_one_taken_over_is_not(redis_client, tenant):
    mine, sessions, session, run = await started(redis_client, tenant)
    claim = keys.session_active_run(tenant, session)
    # The owner stalled past its lease (a long pause of its event loop): lease and session claim ran out, and
    # no other replica took the run over meanwhile. Its renewal takes both again, at its epoch.
    await redis_client.delete(keys.run_lease(run), claim)
    assert await mine.renew([(tenant, run, session, 1)]) == [True]
    assert await redis_client.get(keys.run_lease(run)) == b"a"
    assert await redis_client.get(claim) == run.encode()
    # Not at another epoch than the run's (an owner that lost it once must not take it back) ...
    await redis_client.delete(keys.run_lease(run))
    assert await mine.renew([(tenant, run, session, 2)]) == [False]
    assert not await redis_client.exists(keys.run_lease(run))
    # ... nor once another replica took it over, even after that one's lease ran out in turn.
    other, epoch = await taken_over(redis_client, tenant, run, session, owner="b")
    await redis_client.delete(keys.run_lease(run))
    assert await mine.renew([(tenant, run, session, 1)]) == [False]
    assert await other.renew([(tenant, run, session, epoch)]) == [True]
    # A session another run claimed after the claim ran out stays that run's.
    await redis_client.set(claim, "run-next")
    assert await other.renew([(tenant, run, session, epoch)]) == [True]
    assert await redis_client.get(claim) == b"run-next"


async def test_a_heartbeat_of_more_runs_than_a_round_renews_each_one_it_still_holds(redis_client, tenant, monkeypatch):
    """Renewals go out in rounds (store/runs.py `RENEW_ROUND`): every run of every round is renewed, its session
    claim and its place in the active set with it, and a run lost to another replica is refused in whichever
    round it falls."""
    monkeypatch.setattr("services.orchestrator.store.runs.RENEW_ROUND", 3)
    mine = RunStore(redis_client, owner="a", lease_s=30)
    sessions = SessionStore(redis_client)
    runs = []
    for _ in range(7):
        session = (await sessions.create(tenant, agent_id="agent-1")).id
        run = f"run-{uuid.uuid4().hex[:8]}"
        assert not await mine.start(tenant, run, session, "agent-1")
        runs.append((tenant, run, session, 1))
    _, lost_run, lost_session, _ = runs[4]  # in the second round
    await taken_over(redis_client, tenant, lost_run, lost_session, "b")
    for _, run, session, _ in runs:  # what a renewal restores: the claims' and the leases' expiry
        await redis_client.pexpire(keys.session_active_run(tenant, session), 1000)
        await redis_client.pexpire(keys.run_lease(run), 1000)
    await redis_client.zrem(keys.ACTIVE_RUNS, *(f"{tenant}/{run}" for _, run, _, _ in runs))

    assert await mine.renew(runs) == [True, True, True, True, False, True, True]
    for _, run, session, _ in runs:  # the lost run's lease and claim are the other replica's, left alone
        assert (await redis_client.pttl(keys.run_lease(run)) > 20_000) is (run != lost_run)
        assert (await redis_client.pttl(keys.session_active_run(tenant, session)) > 20_000) is (run != lost_run)
    active = {m.decode() for m in await redis_client.zrange(keys.ACTIVE_RUNS, 0, -1)}
    assert {f"{tenant}/{run}" for _, run, _, _ in runs} & active == {
        f"{tenant}/{run}" for _, run, _, _ in runs if run != lost_run}
