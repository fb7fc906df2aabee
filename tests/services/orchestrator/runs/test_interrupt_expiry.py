"""The index of pauses by expiry (store/runs.py): a pass reads only the expired ones, exactly one replica claims
each, and a pause that ends otherwise (answered, cancelled) leaves the index."""

from __future__ import annotations

import time

from services.orchestrator.store import RunStore
from services.orchestrator.store import keys


async def test_an_expired_pause_is_claimed_by_one_replica_and_leaves_with_its_run(redis_client):
    a, b = RunStore(redis_client, owner="a"), RunStore(redis_client, owner="b")
    async with redis_client.pipeline(transaction=False) as pipe:
        a.queue_paused_at(pipe, "t1", "due", "UserFillUp:Ask", expires_at=time.time() - 1)
        a.queue_paused_at(pipe, "t1", "later", "UserFillUp:Ask", expires_at=time.time() + 3600)
        a.queue_paused_at(pipe, "t1", "never", "UserFillUp:Ask")
        await pipe.execute()
    assert await a.pauses_expired() == [("t1", "due")]
    assert [await a.claim_expired_pause("t1", "due"), await b.claim_expired_pause("t1", "due")] == [True, False]
    assert await b.pauses_expired() == []  # claimed: not read again until its retry time
    assert not await b.claim_expired_pause("t1", "later")

    await a.end_pause("t1", "later", "", status="cancelled", error="Task has been canceled")
    assert await redis_client.zcard(keys.PAUSED_RUNS) == 1  # "due" only, until its run ends
    await a.end_pause("t1", "due", "", status="failed", error="waited")
    assert await redis_client.zcard(keys.PAUSED_RUNS) == 0
