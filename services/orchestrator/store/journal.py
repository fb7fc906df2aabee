"""A run's journal in Redis: its event stream (for clients that rejoin) and its checkpoint (to resume it).

Both are written by one background writer per run, in the order the engine produced them, as one MULTI/EXEC
per batch: whatever queued up while the previous write was in flight goes out together, so a fast run costs
a few round trips, not one per token, and a crash loses a tail of both, never one without the other.

Stream entries have the id `0-<seq>` (seq = the event's position, 1, 2, ...), the protobuf `RunEvent` in `e`,
the component it belongs to in `k` (`checkpoint.node_key`, empty for run-level events) and `f` = 1 when the
event finishes that component. When Redis is unreachable the writer keeps its batch and retries for
`retry_s`; past that the run fails with `JournalUnavailable` rather than go on with nothing stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from services.orchestrator.store import keys

log = logging.getLogger(__name__)

JOURNAL_TTL_S = 7 * 24 * 3600


class JournalUnavailable(RuntimeError):
    """Redis stayed unreachable: the run's events could not be stored."""


class RunJournal:
    def __init__(self, redis: aioredis.Redis, tenant: str, run_id: str, *, ttl_s: int = JOURNAL_TTL_S,
                 retry_s: float = 30.0) -> None:
        self.redis = redis
        self.events_key = keys.run_events(tenant, run_id)
        self.checkpoint_key = keys.run_checkpoint(tenant, run_id)
        self.ttl_s = ttl_s
        self.retry_s = retry_s
        self._pending: list[tuple[str, Any, Any]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.failed: BaseException | None = None
        self.bytes_written = 0
        self._task = asyncio.create_task(self._write_loop(), name=f"journal-{run_id}")

    def event(self, seq: int, data: bytes, node: str, *, record: dict[str, Any] | None = None) -> None:
        """One event; with the checkpoint `record` of the component it finishes, in the same batch (a crash
        keeps both or neither)."""
        self._pending.append(("e", seq, {"e": data, "k": node, "f": 0 if record is None else 1}))
        if record is not None:
            self._pending.append(("c", json.dumps(record, ensure_ascii=False, default=str), None))
        self._idle.clear()
        self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await self._write(batch)
                except JournalUnavailable as exc:
                    self.failed = exc
                    self._idle.set()
                    return
            self._idle.set()

    async def _write(self, batch: list[tuple[str, Any, Any]]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        delay = 0.1
        while True:
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    size = 0
                    for kind, a, b in batch:
                        if kind == "e":
                            pipe.xadd(self.events_key, b, id=f"0-{a}")
                            size += len(b["e"])
                        else:
                            pipe.rpush(self.checkpoint_key, a)
                            size += len(a)
                    pipe.expire(self.events_key, self.ttl_s)
                    pipe.expire(self.checkpoint_key, self.ttl_s)
                    await pipe.execute()
                self.bytes_written += size
                return
            except RedisError as exc:
                if await self._committed(batch):  # the connection dropped after EXEC: it went through
                    return
                if loop.time() + delay > deadline:
                    raise JournalUnavailable(f"Redis is unavailable; the run's events could not be stored ({exc})") from exc
                log.warning("journal write failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _committed(self, batch: list[tuple[str, Any, Any]]) -> bool:
        """Whether a batch whose reply was lost is stored (a batch is one MULTI/EXEC: all of it or none)."""
        last_seq = max((seq for kind, seq, _ in batch if kind == "e"), default=0)
        try:
            newest = await self.redis.xrevrange(self.events_key, count=1)
        except RedisError:
            return False
        return bool(newest) and int(newest[0][0].split(b"-")[1]) >= last_seq > 0

    async def flush(self) -> None:
        """Wait until everything handed over so far is stored (or the journal gave up)."""
        await self._idle.wait()
        if self.failed is not None:
            raise self.failed

    def abort(self) -> None:
        """Stop writing at once, dropping what is pending (another replica owns the run now)."""
        self._pending.clear()
        self._task.cancel()
        self._idle.set()

    async def aclose(self) -> None:
        try:
            await self.flush()
        finally:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def read_checkpoint(redis: aioredis.Redis, tenant: str, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in await redis.lrange(keys.run_checkpoint(tenant, run_id), 0, -1)]


async def copy_checkpoint(redis: aioredis.Redis, tenant: str, source_run: str, target_run: str) -> int:
    """A resumed run starts from its parent's checkpoint (UserFillUp: each answer resumes a new run)."""
    records = await redis.lrange(keys.run_checkpoint(tenant, source_run), 0, -1)
    if records:
        async with redis.pipeline(transaction=True) as pipe:
            pipe.rpush(keys.run_checkpoint(tenant, target_run), *records)
            pipe.expire(keys.run_checkpoint(tenant, target_run), JOURNAL_TTL_S)
            await pipe.execute()
    return len(records)


async def read_events(redis: aioredis.Redis, tenant: str, run_id: str, after: int = 0,
                      count: int = 500) -> list[tuple[int, dict[bytes, bytes]]]:
    """Stored events after seq `after`, oldest first: [(seq, fields)]."""
    entries = await redis.xrange(keys.run_events(tenant, run_id), min=f"0-{after + 1}", max="+", count=count)
    return [(int(eid.split(b"-")[1]), fields) for eid, fields in entries]


async def tail_events(redis: aioredis.Redis, tenant: str, run_id: str, after: int = 0,
                      block_ms: int = 1000) -> AsyncIterator[tuple[int, dict[bytes, bytes]]]:
    """Stored events after `after`, then new ones as they are written; the caller decides when to stop."""
    key = keys.run_events(tenant, run_id)
    last = after
    while True:
        batch = await read_events(redis, tenant, run_id, last)
        if not batch:
            reply = await redis.xread({key: f"0-{last}"}, count=500, block=block_ms)
            batch = [(int(eid.split(b"-")[1]), fields) for _, entries in reply for eid, fields in entries]
            if not batch:
                yield 0, {}  # a heartbeat: lets the caller check whether the run is still going
                continue
        for seq, fields in batch:
            last = seq
            yield seq, fields


async def drop_unfinished(redis: aioredis.Redis, tenant: str, run_id: str) -> int:
    """Before a crashed run resumes in place: delete the stored events of components that did not finish (they
    run again and send them anew), so a reader sees every component's output once. Returns the last seq."""
    key = keys.run_events(tenant, run_id)
    pending: dict[str, list[bytes]] = {}
    last = 0
    for eid, fields in await redis.xrange(key, "-", "+"):
        last = int(eid.split(b"-")[1])
        node = fields.get(b"k", b"").decode()
        if not node:
            continue
        pending.setdefault(node, []).append(eid)
        if fields.get(b"f") == b"1":
            pending[node] = []
    stale = [eid for ids in pending.values() for eid in ids]
    if stale:
        await redis.xdel(key, *stale)
    return last
