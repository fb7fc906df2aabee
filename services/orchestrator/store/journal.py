"""A run's journal in Redis: its event stream (for clients that rejoin) and its checkpoint (to resume it).

Both are written by one background writer per run, in the order the engine produced them, as one Lua script
call per batch (atomic, keys of the run's one hash slot): whatever queued up while the previous write was in
flight goes out together, so a fast run costs a few round trips, not one per token, and a crash loses a tail
of both, never one without the other. At the run's end the writer stops (`settle`) and the last batch rides
in the round trip that stores the turn (`queue_pending`, run_manager.py).

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

# KEYS: events, checkpoint. ARGV: ttl, then entries: 'e', seq, event, node key, finished (0/1) | 'c', record.
_APPEND = """
local i = 2
while i <= #ARGV do
  if ARGV[i] == 'e' then
    redis.call('XADD', KEYS[1], '0-' .. ARGV[i + 1], 'e', ARGV[i + 2], 'k', ARGV[i + 3], 'f', ARGV[i + 4])
    i = i + 5
  else
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    i = i + 2
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1
"""


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
        self._pending: list[tuple] = []  # ("e", seq, event, node key, finished) and ("c", record), in order
        self._held = False  # settled: what is pending waits for queue_pending or aclose
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.failed: BaseException | None = None
        self.bytes_written = 0
        self._task = asyncio.create_task(self._write_loop(), name=f"journal-{run_id}")

    def event(self, seq: int, data: bytes, node: str, *, record: dict[str, Any] | None = None) -> None:
        """One event; with the checkpoint `record` of the component it finishes, in the same batch (a crash
        keeps both or neither)."""
        self._pending.append(("e", seq, data, node, 0 if record is None else 1))
        if record is not None:
            self._pending.append(("c", json.dumps(record, ensure_ascii=False, default=str)))
        self._idle.clear()
        self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending and not self._held:
                batch, self._pending = self._pending, []
                try:
                    await self._write(batch)
                except JournalUnavailable as exc:
                    self.failed = exc
                    self._idle.set()
                    return
            self._idle.set()

    def _queue(self, pipe: aioredis.client.Pipeline, batch: list[tuple]) -> None:
        pipe.eval(_APPEND, 2, self.events_key, self.checkpoint_key, self.ttl_s, *(x for entry in batch for x in entry))

    async def _write(self, batch: list[tuple]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        delay = 0.1
        while True:
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    self._queue(pipe, batch)
                    await pipe.execute()
                self.bytes_written += _size(batch)
                return
            except RedisError as exc:
                if await self._committed(batch):  # the connection dropped after the script ran: it went through
                    return
                if loop.time() + delay > deadline:
                    raise JournalUnavailable(f"Redis is unavailable; the run's events could not be stored ({exc})") from exc
                log.warning("journal write failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _committed(self, batch: list[tuple]) -> bool:
        """Whether a batch whose reply was lost is stored (a batch is one script call: all of it or none)."""
        last_seq = max((entry[1] for entry in batch if entry[0] == "e"), default=0)
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

    async def settle(self) -> None:
        """Stop writing in the background: wait for the batch in flight (raising if the journal gave up). What
        is still pending goes out with `queue_pending` in the caller's round trip, or with `aclose`."""
        self._held = True
        self._wake.set()
        await self.flush()

    def queue_pending(self, pipe: aioredis.client.Pipeline) -> bool:
        """After `settle`: the pending batch as one command on `pipe`; call `pending_written` once `pipe` went
        through, or `aclose` writes it itself. Whether there was anything to queue."""
        if not self._pending:
            return False
        self._queue(pipe, self._pending)
        return True

    def pending_written(self) -> None:
        self.bytes_written += _size(self._pending)
        self._pending = []

    def abort(self) -> None:
        """Stop writing at once, dropping what is pending (another replica owns the run now)."""
        self._pending.clear()
        self._task.cancel()
        self._idle.set()

    async def aclose(self) -> None:
        """Store what is still pending (with the usual retries), then stop."""
        self._held = False
        if self._pending:
            self._idle.clear()
            self._wake.set()
        try:
            await self.flush()
        finally:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _size(batch: list[tuple]) -> int:
    return sum(len(entry[2]) if entry[0] == "e" else len(entry[1]) for entry in batch)


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
