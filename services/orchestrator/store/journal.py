"""A run's journal in Redis: its event stream (for clients that rejoin) and its checkpoint (to resume it).

Both are written in the order the engine produced them, as one Lua script call per batch (atomic, keys of the
run's one hash slot), by the process's one JournalWriter: whatever all its runs queued up while the previous
write was in flight goes out together in one pipeline, so a run costs a few round trips, not one per token,
and a crash loses a tail of both, never one without the other. At the run's end its journal stops (`settle`)
and the last batch rides in the round trip that stores the turn (`queue_pending`, runs/ending.py).

When the journal policy says so (services/common/speed_policies.py, `batched`; docs/speed-policies.md), the
writer paces itself (`pace`): it writes no sooner than that long after its previous write, each write carrying
what every run produced meanwhile; and a journal may start late (`first_write_delay_s`): it writes nothing for
that long, so a short run stores its whole journal with its turn, in the round trip that ends it. What that
costs: a reader of the run's stream (WatchRun, a client rejoining) sees events that much later, and a crash in
that time loses them (the components that had not finished run again; see `drop_unfinished`). The default
policy, `at_once`, does neither.

Stream entries have the id `0-<seq>` (seq = the event's position, 1, 2, ...), the protobuf `RunEvent` in `e`,
the component it belongs to in `k` (`checkpoint.node_key`, empty for run-level events) and `f` = 1 when the
event finishes that component.

When Redis is unreachable the writer keeps its batch and sends it again for `retry_s`; past that the run fails
with `JournalUnavailable` rather than go on with nothing stored. The attempts and the waits between them are
redis-py's `Retry` with the client's backoff (`redis_client.retry`, the one retry rule for Redis), kept going
until every journal of the batch is stored or has given up. What the journal adds to that rule, and why the
client's own retry is not enough: a batch whose reply was lost or is an error may be stored, so it is checked
against the stream (`_committed`) before it counts as failed and is sent again; and a journal gives up on its
own deadline, at its first failure `retry_s` or more after its batch first failed (so at most one backoff,
`redis_client.BACKOFF_CAP_S`, past it), not after a count of attempts. The client's retry runs inside each
attempt (a connection Redis dropped is replaced at once); a batch it sends again after a lost reply fails on
its first event's id (the stream has it) and is then found stored.

Fencing: every write checks, in its script, that the run is still at the epoch its owner holds it at (its
attempt number, `attempts` in its record; store/runs.py). A batch refused for that (another replica took the
run over while this one was stalled) is not sent again: the journal stops with `RunLost` and tells its run
(`on_lost`), which stops driving it. So the stream never holds an event of a replica after it lost the run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator, Callable

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError

from services.common.json_fields import dump_bytes
from services.orchestrator.store import keys, redis_client

log = logging.getLogger(__name__)

JOURNAL_TTL_S = 7 * 24 * 3600
_YIELD_TURNS = 4  # bounded: under load something is handed over every turn, and the writer must still write

# KEYS: events, checkpoint, run hash. ARGV: epoch, ttl, then entries: 'e', seq, event, node key, finished (0/1) |
# 'c', record. 1, or 0 when the run is at another epoch (a run with no record is not fenced: none is journaled
# without one, but tests and benches are).
_APPEND = """
local epoch = redis.call('HGET', KEYS[3], 'attempts')
if epoch and epoch ~= ARGV[1] then return 0 end
local i = 3
while i <= #ARGV do
  if ARGV[i] == 'e' then
    redis.call('XADD', KEYS[1], '0-' .. ARGV[i + 1], 'e', ARGV[i + 2], 'k', ARGV[i + 3], 'f', ARGV[i + 4])
    i = i + 5
  else
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    i = i + 2
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""
# KEYS: events, run hash. ARGV: epoch, then stream entry ids. Before a run taken over resumes: the events of the
# components that did not finish go, and the run is no longer `resuming`; 0 (nothing done) when the run is at
# another epoch (taken over again meanwhile).
_DROP = """
if redis.call('HGET', KEYS[2], 'attempts') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 1000 do redis.call('XDEL', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
redis.call('HSET', KEYS[2], 'resuming', '')
return 1
"""
# KEYS: checkpoint, run hash. ARGV: epoch, ttl, then records. A new run's checkpoint from its parent's: 1, 0
# when it has one already (this copy sent again after its reply was lost), -1 when the run is at another epoch.
_COPY = """
if redis.call('HGET', KEYS[2], 'attempts') ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""


class JournalUnavailable(RuntimeError):
    """Redis stayed unreachable: the run's events could not be stored."""


class RunLost(RuntimeError):
    """Another replica took the run over: this one's writes to it are refused (module docstring, fencing)."""


class JournalWriter:
    """The one writer of a process's journals: what all its runs handed over while the previous write was in
    flight goes out in one pipeline (one script call per run), so Redis sees a round trip per moment of
    activity, not one per run per token."""

    def __init__(self, redis: aioredis.Redis, *, pace: Callable[[], float] = lambda: 0.0,
                 ttl_s: int = JOURNAL_TTL_S) -> None:
        self.redis = redis
        self.ttl_s = ttl_s  # how long a journal is kept after its last write (its run's: store/runs.py)
        self._sha = redis.register_script(_APPEND).sha
        self._ready: dict[RunJournal, None] = {}  # journals with a batch to write, in the order they asked
        self._task: asyncio.Task | None = None
        self._handed = 0  # hand-overs so far
        self._pace = pace  # seconds between two writes now (0: write as soon as the previous one is done)
        self._last_write = float("-inf")  # loop time the previous write began

    def ready(self, journal: RunJournal) -> None:
        self._ready[journal] = None
        self._handed += 1
        if self._task is None:  # the loop ends when nothing is left: no task lingers between bursts
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="journal-writer")

    def unready(self, journal: RunJournal) -> None:
        self._ready.pop(journal, None)

    async def _loop(self) -> None:
        try:
            # Loop turns first, until one passes with nothing new handed over (at most _YIELD_TURNS): what woke
            # with the events (their callers' sends) goes before their storing.
            for _ in range(_YIELD_TURNS):
                handed = self._handed
                await asyncio.sleep(0)
                if self._handed == handed:
                    break
            while self._ready:
                loop = asyncio.get_running_loop()
                wait = self._last_write + self._pace() - loop.time()
                if wait > 0:  # busy: what the runs produce meanwhile goes in this write too
                    await asyncio.sleep(wait)
                self._last_write = loop.time()
                journals, self._ready = list(self._ready), {}
                await self._write([(j, j._take()) for j in journals])
        finally:
            self._task = None

    async def _write(self, batch: list[tuple[RunJournal, list[tuple]]]) -> None:
        """Store every journal's batch: attempts by the Redis retry rule until each is stored or its journal's
        `retry_s` is spent (module docstring)."""
        attempt = _Attempt(self, batch)
        await redis_client.retry(-1, (_Unstored,)).call_with_retry(attempt, attempt.failed)

    async def _send(self, batch: list[tuple[RunJournal, list[tuple]]]) -> list[Any]:
        replies = await self._pipeline(batch)
        unknown = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if unknown:  # Redis restarted and forgot the script: load it, send those again
            await self.redis.script_load(_APPEND)
            for i, reply in zip(unknown, await self._pipeline([batch[i] for i in unknown])):
                replies[i] = reply
        return replies

    async def _pipeline(self, batch: list[tuple[RunJournal, list[tuple]]]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for journal, entries in batch:
                pipe.evalsha(self._sha, 3, *journal._script_args(entries))
            return await pipe.execute(raise_on_error=False)


class _Unstored(RedisError):
    """Some batches of an attempt are neither stored nor given up: the writer's retry sends them again."""


class _Attempt:
    """One call per attempt at storing a writer's batches: what is left of them is sent; a batch whose reply is
    an error is checked, and counts as stored if it is (its reply was lost, or it was sent twice)."""

    def __init__(self, writer: JournalWriter, batch: list[tuple[RunJournal, list[tuple]]]) -> None:
        self.writer = writer
        self.left = batch

    async def __call__(self) -> None:
        left, self.left, error = self.left, [], None
        try:
            replies: list[Any] = await self.writer._send(left)
        except RedisError as exc:
            replies = [exc] * len(left)
        for (journal, entries), reply in zip(left, replies):
            if reply == 0:  # refused: another replica owns the run now
                journal._lost()
            elif not isinstance(reply, Exception) or await journal._committed(entries):
                journal._done()
            elif journal._give_up_after(asyncio.get_running_loop().time()):
                journal._fail(JournalUnavailable(f"Redis is unavailable; the run's events could not be stored ({reply})"))
            else:
                self.left.append((journal, entries))
                error = reply
        if self.left:
            raise _Unstored(f"journal write failed for {len(self.left)} run(s) ({error}); retrying")

    async def failed(self, error: BaseException) -> None:
        log.warning("%s", error)


class RunJournal:
    """One run's journal: `event` hands events over in order, the process's JournalWriter stores them."""

    def __init__(self, writer: JournalWriter, tenant: str, run_id: str, *, epoch: int = 1,
                 on_lost: Callable[[], None] | None = None, ttl_s: int | None = None, retry_s: float = 30.0,
                 held: bool = False, first_write_delay_s: float = 0.0) -> None:
        """`epoch`: the one its owner holds the run at (every write checks it); `on_lost`: called once when a
        write is refused for it."""
        self.writer = writer
        self.redis = writer.redis
        self.run_id = run_id
        self.events_key = keys.run_events(tenant, run_id)
        self.checkpoint_key = keys.run_checkpoint(tenant, run_id)
        self.run_key = keys.run(tenant, run_id)
        self.epoch = epoch
        self.on_lost = on_lost
        self.ttl_s = writer.ttl_s if ttl_s is None else ttl_s
        self.retry_s = retry_s
        self._pending: list[tuple] = []  # ("e", seq, event, node key, finished) and ("c", record), in order
        self._in_flight = False  # the writer holds a batch of this journal
        self._held = held  # settled (or not released yet): what is pending waits
        self._deadline: float | None = None  # while a batch fails: when to give up
        self._idle = asyncio.Event()  # nothing in flight, nothing the writer will take
        self._idle.set()
        self.failed: BaseException | None = None
        # While set, the first write waits (module docstring).
        self._delay: asyncio.TimerHandle | None = (
            asyncio.get_running_loop().call_later(first_write_delay_s, self._delay_over) if first_write_delay_s > 0 else None)

    def event(self, seq: int, data: bytes | Callable[[], bytes], node: str, *,
              record: dict[str, Any] | None = None) -> None:
        """One event (its bytes, or what makes them when the batch is written: off the caller's way); with the
        checkpoint `record` of the component it finishes, in the same batch (a crash keeps both or neither)."""
        self._pending.append(("e", seq, data, node, 0 if record is None else 1))
        if record is not None:
            self._pending.append(("c", dump_bytes(record)))
        self._offer()

    def _offer(self) -> None:
        """Hand what is pending to the writer, unless it holds a batch of this journal already, or the journal
        waits (held, its first write's delay) or gave up."""
        if self._pending and not self._in_flight and not self._held and self._delay is None and self.failed is None:
            self._idle.clear()
            self.writer.ready(self)

    def _delay_over(self) -> None:
        self._delay = None
        self._offer()

    def _stop(self) -> None:
        """No more background writes, and no first write to wait for."""
        if self._delay is not None:
            self._delay.cancel()
            self._delay = None

    # ---- the writer's side
    def _take(self) -> list[tuple]:
        entries, self._pending = self._pending, []
        self._in_flight = True
        return entries

    def _done(self) -> None:
        self._in_flight = False
        self._deadline = None
        if self._pending and not self._held:
            self.writer.ready(self)
        else:
            self._idle.set()

    def _give_up_after(self, now: float) -> bool:
        """After a failure at `now`: whether `retry_s` has passed since its batch first failed."""
        if self._deadline is None:
            self._deadline = now + self.retry_s
        return now >= self._deadline

    def _fail(self, exc: Exception) -> None:
        self.failed = exc
        self._in_flight = False
        self._pending.clear()
        self._idle.set()

    def _lost(self) -> None:
        """A write was refused: the run is at another epoch. Nothing more is written; the run is told."""
        self._stop()
        self._held = True
        self.writer.unready(self)
        self._fail(RunLost(f"run {self.run_id}: another replica took it over (this replica held epoch {self.epoch})"))
        if self.on_lost is not None:
            on_lost, self.on_lost = self.on_lost, None
            on_lost()

    def _script_args(self, entries: list[tuple]) -> list[Any]:
        args = [self.events_key, self.checkpoint_key, self.run_key, self.epoch, self.ttl_s]
        for entry in entries:
            if entry[0] == "e" and entry[2].__class__ is not bytes:
                entry = ("e", entry[1], entry[2](), entry[3], entry[4])
            args.extend(entry)
        return args

    async def _committed(self, entries: list[tuple]) -> bool:
        """Whether a batch whose reply was lost is stored (a batch is one script call: all of it or none): its
        last event is in the stream."""
        last_seq = max((entry[1] for entry in entries if entry[0] == "e"), default=0)
        if not last_seq:
            return False
        try:
            return bool(await self.redis.xrange(self.events_key, min=f"0-{last_seq}", max=f"0-{last_seq}", count=1))
        except RedisError:
            return False

    # ---- the run's side
    async def flush(self) -> None:
        """Wait until everything handed over so far is stored (or the journal gave up)."""
        await self._idle.wait()
        if self.failed is not None:
            raise self.failed

    async def settle(self) -> None:
        """Stop writing in the background: wait for the batch in flight (raising if the journal gave up). What
        is still pending goes out with `queue_pending` in the caller's round trip, or with `aclose`."""
        self._held = True
        self._stop()
        self.writer.unready(self)
        if not self._in_flight:
            self._idle.set()
        await self.flush()

    def queue_pending(self, pipe: aioredis.client.Pipeline) -> bool:
        """After `settle`: the pending batch as one command on `pipe` (the script's text: it works on a Redis
        that forgot the script), whose reply is 0 when it was refused (`RunLost`); call `pending_written` once
        `pipe` went through, or `aclose` writes it itself. Whether there was anything to queue."""
        if not self._pending:
            return False
        pipe.eval(_APPEND, 3, *self._script_args(self._pending))
        return True

    def pending_written(self) -> None:
        self._pending = []

    async def pending_stored(self) -> bool:
        """Whether the pending batch, queued with `queue_pending` and answered with an error, is stored anyway
        (it was sent twice, its first reply lost)."""
        return await self._committed(self._pending)

    def abort(self) -> None:
        """Stop writing, dropping what is pending (another replica owns the run now)."""
        self._held = True
        self._stop()
        self._pending.clear()
        self.writer.unready(self)
        self._idle.set()

    def release(self) -> None:
        """Write in the background again (a journal made `held` until its run was recorded), once its first
        write's delay is over."""
        self._held = False
        self._offer()

    async def aclose(self) -> None:
        """Store what is still pending (with the usual retries)."""
        self._stop()
        self.release()
        await self.flush()


async def read_checkpoint(redis: aioredis.Redis, tenant: str, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in await redis.lrange(keys.run_checkpoint(tenant, run_id), 0, -1)]


async def copy_checkpoint(redis: aioredis.Redis, tenant: str, source_run: str, target_run: str, epoch: int,
                          ttl_s: int = JOURNAL_TTL_S) -> int:
    """A resumed run starts from its parent's checkpoint (UserFillUp: each answer resumes a new run), written by
    the new run's owner at `epoch` (RunLost when it lost the run meanwhile). How many records."""
    records = await redis.lrange(keys.run_checkpoint(tenant, source_run), 0, -1)
    if records:
        if await redis.eval(_COPY, 2, keys.run_checkpoint(tenant, target_run), keys.run(tenant, target_run),
                            epoch, ttl_s, *records) < 0:
            raise RunLost(f"run {target_run}: another replica took it over (this replica held epoch {epoch})")
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


async def drop_unfinished(redis: aioredis.Redis, tenant: str, run_id: str, epoch: int) -> tuple[int, set[str]]:
    """Before a crashed run resumes in place, by its new owner at `epoch`: delete the stored events of
    components that did not finish (they run again and send them anew), so a reader sees every component's
    output once, and the run is no longer `resuming`, in one script (RunLost when another replica took it over
    meanwhile). Returns the last seq and the components whose events were dropped (`checkpoint.node_key`): a
    client may have seen them start, so their NodeStarted says they start again (runs/pump.py)."""
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
    if not await redis.eval(_DROP, 2, key, keys.run(tenant, run_id), epoch, *stale):
        raise RunLost(f"run {run_id}: another replica took it over (this replica held epoch {epoch})")
    return last, {node for node, ids in pending.items() if ids}
