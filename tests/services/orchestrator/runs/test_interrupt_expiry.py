"""The index of pauses by expiry (store/runs.py): a pass reads only the expired ones, exactly one replica claims
each, and a pause that ends otherwise (answered, cancelled) leaves the index."""

from __future__ import annotations

import time
import uuid

from services.orchestrator.store import RunStore
from services.orchestrator.store import keys


async def test_an_expired_pause_is_claimed_by_one_replica_and_leaves_with_its_run(redis_client):
    a, b = RunStore(redis_client, owner="a"), RunStore(redis_client, owner="b")
    t = f"t-{uuid.uuid4().hex[:8]}"  # the index is shared by every tenant (and other tests' stacks)

    async def expired(store: RunStore) -> list[str]:
        return [run for tenant, run in await store.pauses_expired(limit=1000) if tenant == t]

    async def indexed() -> set[str]:
        return {m.decode().split("/", 1)[1] for m in await redis_client.zrange(keys.PAUSED_RUNS, 0, -1)
                if m.decode().startswith(f"{t}/")}

    async with redis_client.pipeline(transaction=False) as pipe:
        a.queue_pause_expiry(pipe, t, "due", time.time() - 1)
        a.queue_pause_expiry(pipe, t, "later", time.time() + 3600)  # ("never": a pause with no timeout)
        await pipe.execute()
    assert await expired(a) == ["due"]
    assert [await a.claim_expired_pause(t, "due"), await b.claim_expired_pause(t, "due")] == [True, False]
    assert await expired(b) == []  # claimed: not read again until its retry time
    assert not await b.claim_expired_pause(t, "later")

    await a.end_pause(t, "later", "", status="cancelled", error="Task has been canceled")
    assert await indexed() == {"due"}  # "due" only, until its run ends
    await a.end_pause(t, "due", "", status="failed", error="waited")
    assert await indexed() == set()
