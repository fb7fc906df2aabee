"""Runs: status, ownership through leases, cancellation that reaches whichever replica runs them, traces.

A run is owned by one replica through a lease: a key holding the replica's id that expires unless the owner's
heartbeat renews it (every third of `lease_s`). The session's claim expires with it, so a replica that dies
holds its session for at most one lease. Every replica's reaper looks for running runs whose lease ran out
(`ACTIVE_RUNS`, scored by expiry), takes one over atomically, and resumes it from its checkpoint or fails it.
Each take-over moves the run to a new epoch (its attempt number): an owner that stalled past its lease and
comes back finds every write it makes to the run or its session refused (fencing: the comment atop
store/run_scripts.py), and stops driving the run.

A cancel sets a flag (checked when a run starts) and publishes on one channel that every replica listens to,
so a running run stops within a round trip; a run whose owner is gone is marked cancelled right away.

Statuses: running, waiting_for_user, succeeded, failed, cancelled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncIterator, Callable

import redis.asyncio as aioredis

from services.common.errors import AlreadyExists, FailedPrecondition
from services.common.json_fields import dump_bytes
from services.orchestrator.store import keys, session_fence
from services.orchestrator.store import run_scripts as scripts
from services.orchestrator.store._records import queue_script
from services.orchestrator.store.journal import read_events, tail_events
from services.orchestrator.store.outbox import queue_notice

log = logging.getLogger(__name__)

RUN_TTL_S = 7 * 24 * 3600  # how long a run is kept after its last write, by default (TRELLIS_RUN_TTL_S)
# What a run's trace keeps: every tool call (tool, arguments, result, error, elapsed) and every Agent
# reasoning step (thought, tool, input, observation, position).
LOG_KINDS = ("tool_calls", "thoughts")
CANCEL_TTL_S = 600
FIRST_EPOCH = 1  # the epoch of a run's first owner (its attempt number)
TERMINAL = ("succeeded", "failed", "cancelled")
RENEW_ROUND = 500  # runs renewed per round trip (`RunStore.renew`)

class SessionBusy(FailedPrecondition):
    """A run cannot start: its session runs another one (`holder`). What a double-text does about it is
    runs/starts.py's `make_way`."""

    def __init__(self, session_id: str, holder: str) -> None:
        super().__init__(f"session {session_id!r} is busy with run {holder!r}: wait for it to finish or cancel it")
        self.session_id = session_id
        self.holder = holder


def _decode(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


class RunStore:
    def __init__(self, redis: aioredis.Redis, *, owner: str = "", lease_s: float = 10.0,
                 ttl_s: int = RUN_TTL_S) -> None:
        """`ttl_s`: how long a run (its record, session index, trace) is kept after its last write."""
        self.redis = redis
        self.owner = owner  # this replica's id in the leases it holds
        self.lease_s = lease_s
        self.ttl_s = ttl_s
        self._renew = redis.register_script(scripts.RENEW)
        self._renew_claim = redis.register_script(scripts.RENEW_CLAIM)
        self._claim = redis.register_script(scripts.CLAIM)
        self._unclaim = redis.register_script(scripts.UNCLAIM)
        self._start = redis.register_script(scripts.START)
        self._end = redis.register_script(scripts.END)
        self._release = redis.register_script(scripts.RELEASE)
        self._take_over = redis.register_script(scripts.TAKE_OVER)
        self._reclaim = redis.register_script(scripts.RECLAIM)
        self._claim_expired = redis.register_script(scripts.CLAIM_EXPIRED)
        self._mark_answered = redis.register_script(scripts.MARK_ANSWERED)

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    async def start(self, tenant: str, run_id: str, session_id: str, agent_id: str = "", *,
                    spec: dict[str, Any] | None = None, parent_run_id: str = "",
                    before: Callable[[aioredis.client.Pipeline], Any] | None = None) -> bool:
        """Claim the run's session, record the run and take its lease, in one round trip: one run at a time per
        session, or turns would overwrite each other's state. A busy session fails at once, naming the run
        that holds it (and the run is not left recorded). Returns whether the run was cancelled before it started.
        `before(pipe)` queues writes that go first in the same round trip (the run's new session). Its owner holds
        the run at epoch `FIRST_EPOCH` (the module's comment on fencing)."""
        now = time.time()
        record = {"session_id": session_id, "agent_id": agent_id, "started_at": now, "finished_at": "", "error": "",
                  "owner": self.owner, "attempts": FIRST_EPOCH, "parent_run_id": parent_run_id,
                  # a child run's caller (RunSpec.caller_run_id): GetRun and ListRuns show the link
                  "caller_run_id": (spec or {}).get("caller_run_id", ""),
                  "spec": dump_bytes(spec or {})}
        member = f"{tenant}/{run_id}"
        session_keys = [keys.session_active_run(tenant, session_id), keys.session_runs(tenant, session_id)] if session_id else []
        run_keys = [keys.run(tenant, run_id), keys.run_lease(run_id), keys.cancel_flag(run_id)]
        async with self.redis.pipeline(transaction=False) as pipe:
            if before is not None:
                before(pipe)
            first = len(pipe)
            if session_keys:
                queue_script(pipe, self._claim, [*session_keys, keys.session(tenant, session_id)],
                             [run_id, self._lease_ms, now, session_fence.value(run_id, FIRST_EPOCH), self.ttl_s])
            queue_script(pipe, self._start, run_keys,
                         [self.owner, self._lease_ms, now, self.ttl_s, *(x for kv in record.items() for x in kv)])
            pipe.zadd(keys.ACTIVE_RUNS, {member: now + self.lease_s})
            replies = await pipe.execute()
        (claimed, holder), (outcome, detail) = replies[first] if session_keys else (b"ok", b""), replies[-2]
        if claimed == b"busy":
            if outcome == b"ok":  # recorded beside a busy session: undo it
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.delete(keys.run(tenant, run_id), keys.run_lease(run_id))
                    pipe.zrem(keys.ACTIVE_RUNS, member)
                    await pipe.execute()
            raise SessionBusy(session_id, holder.decode())
        if outcome == b"exists":
            if claimed == b"ok" and session_keys:  # the claim was taken for a run that does not start
                await self._unclaim(keys=session_keys, args=[run_id, 0 if detail.decode() == session_id else 1])
            raise AlreadyExists(f"run {run_id!r} already exists: run ids must be unique")
        return detail == b"1"

    async def renew(self, runs: list[tuple[str, str, str, int]]) -> list[bool]:
        """Heartbeat for (tenant, run id, session id, epoch) of this replica: whether each lease is still ours.
        In rounds of at most `RENEW_ROUND` runs, so that a replica driving thousands of runs never holds its
        event loop for the whole heartbeat (a round is a few milliseconds of packing and parsing; ten thousand
        runs at once held it for over a hundred: bench/renewal_bench.py)."""
        held: list[bool] = []
        for first in range(0, len(runs), RENEW_ROUND):
            held += await self._renew_round(runs[first:first + RENEW_ROUND])
        return held

    async def _renew_round(self, runs: list[tuple[str, str, str, int]]) -> list[bool]:
        """The leases first; then, for those still held, the session claims and the active set (one ZADD)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, run_id, _, epoch in runs:
                queue_script(pipe, self._renew, [keys.run_lease(run_id), keys.run(tenant, run_id)],
                             [self.owner, self._lease_ms, epoch])
            held = [bool(ok) for ok in await pipe.execute()]
        if any(held):
            expiry = time.time() + self.lease_s
            async with self.redis.pipeline(transaction=False) as pipe:
                for (tenant, run_id, session_id, epoch), ok in zip(runs, held):
                    if ok and session_id:
                        queue_script(pipe, self._renew_claim,
                                     [keys.session_active_run(tenant, session_id), keys.session(tenant, session_id)],
                                     [run_id, self._lease_ms, epoch])
                pipe.zadd(keys.ACTIVE_RUNS, {f"{tenant}/{run_id}": expiry
                                             for (tenant, run_id, _, _), ok in zip(runs, held) if ok})
                await pipe.execute()
        return held

    async def expired(self, limit: int = 20) -> list[tuple[str, str]]:
        """(tenant, run id) of running runs whose lease ran out: their owner stopped renewing."""
        members = await self.redis.zrangebyscore(keys.ACTIVE_RUNS, "-inf", time.time(), start=0, num=limit)
        return [tuple(m.decode().split("/", 1)) for m in members]  # type: ignore[misc]

    async def take_over(self, tenant: str, run_id: str) -> int | None:
        """This replica's lease on an orphaned run: the attempt number, its epoch from now on (every write of the
        run checks it), or None if another replica was faster (or the run is alive, or no longer running: then it
        leaves the active set)."""
        member = f"{tenant}/{run_id}"
        attempts = int(await self._take_over(keys=[keys.run_lease(run_id), keys.run(tenant, run_id)],
                                             args=[self.owner, self._lease_ms]))
        if attempts < 0:
            await self.redis.zrem(keys.ACTIVE_RUNS, member)
        if attempts <= 0:
            return None
        await self.redis.zadd(keys.ACTIVE_RUNS, {member: time.time() + self.lease_s})
        return attempts

    async def claim_session(self, tenant: str, session_id: str, run_id: str, epoch: int = FIRST_EPOCH) -> bool:
        """A run taken over at `epoch` takes its session back (free, or still marked with this run), and with it
        the session's writes (its fence); False if another run started on it meanwhile."""
        session_keys = [keys.session_active_run(tenant, session_id), keys.session(tenant, session_id)]
        return bool(await self._reclaim(keys=session_keys, args=[run_id, self._lease_ms, epoch]))

    @staticmethod
    def queue_pause_expiry(pipe, tenant: str, run_id: str, expires_at: float) -> None:
        """On `pipe`: when the wait of a run that waits for the user expires, in the index of pauses by expiry
        (`pauses_expired`). The component it waits at is recorded with its end (`queue_finish`)."""
        pipe.zadd(keys.PAUSED_RUNS, {f"{tenant}/{run_id}": expires_at})

    async def pauses_expired(self, limit: int = 50) -> list[tuple[str, str]]:
        """(tenant, run id) of paused runs whose wait expired (and not yet claimed, or claimed by a replica
        that did not end them in time): one read of the index."""
        members = await self.redis.zrangebyscore(keys.PAUSED_RUNS, "-inf", time.time(), start=0, num=limit)
        return [tuple(m.decode().split("/", 1)) for m in members]  # type: ignore[misc]

    async def claim_expired_pause(self, tenant: str, run_id: str, *, retry_s: float = 60.0) -> bool:
        """Whether this replica applies the expired pause's `on_timeout` (exactly one does; another may take it
        again after `retry_s` if this one never ends the pause)."""
        now = time.time()
        return bool(await self._claim_expired(keys=[keys.PAUSED_RUNS], args=[f"{tenant}/{run_id}", now, now + retry_s]))

    async def mark_answered(self, tenant: str, run_id: str, by: str) -> bool:
        """Mark a paused run's wait as answered (`by`: the answering run, or "timeout"), atomically: False when
        something else answered it already."""
        return bool(await self._mark_answered(keys=[keys.run(tenant, run_id)], args=[by]))

    async def forget_pause(self, tenant: str, run_id: str) -> None:
        """Out of the index of pauses by expiry (its run no longer waits)."""
        await self.redis.zrem(keys.PAUSED_RUNS, f"{tenant}/{run_id}")

    def queue_finish(self, pipe, tenant: str, run_id: str, session_id: str, *, status: str, error: str = "",
                     epoch: int | None = None, tool_calls: list[dict] = (), thoughts: list[dict] = (),
                     paused_node: str = "") -> int:
        """The run's end on `pipe`: status, trace (`tool_calls`, `thoughts`: LOG_KINDS) and the component it
        paused at, lease and cancel flag gone, in one script; then out of the active set (and, unless it waits
        for the user, out of the pauses by expiry), the session freed if this run holds it. With the `epoch` of
        the run's owner, only while it still owns the run (the module's comment on fencing). Returns the place
        on `pipe` of the script's reply: 1, or 0 when the end was not this owner's to store."""
        fenced = "" if epoch is None else epoch
        place = len(pipe)
        queue_script(pipe, self._end, [keys.run(tenant, run_id), keys.cancel_flag(run_id), keys.run_lease(run_id),
                                       *(keys.run_log(tenant, run_id, kind) for kind in LOG_KINDS)],
                     [fenced, status, time.time(), error, paused_node, len(tool_calls), self.ttl_s,
                      *(dump_bytes(e) for e in tool_calls), *(dump_bytes(e) for e in thoughts)])
        pipe.zrem(keys.ACTIVE_RUNS, f"{tenant}/{run_id}")
        if status != "waiting_for_user":
            pipe.zrem(keys.PAUSED_RUNS, f"{tenant}/{run_id}")
        if session_id:
            queue_script(pipe, self._release,
                         [keys.session_active_run(tenant, session_id), keys.session(tenant, session_id)], [run_id, fenced])
        return place

    async def free_session(self, tenant: str, session_id: str, run_id: str) -> None:
        """The session's claim gone if `run_id`, a run that has ended, still holds it (what its end does)."""
        await self._release(keys=[keys.session_active_run(tenant, session_id), keys.session(tenant, session_id)],
                            args=[run_id, ""])

    async def finish(self, tenant: str, run_id: str, session_id: str, *, status: str, error: str = "",
                     notify: bool = True, epoch: int | None = None) -> bool:
        """End a run no engine ends (cancelled while it waits or without an owner; failed to resume, by its new
        owner at `epoch`); `notify`: with its completion webhooks' notice in the same round trip
        (store/outbox.py), as runs/ending.py does. Whether it was ended here (False: another replica owns it)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            place = self.queue_finish(pipe, tenant, run_id, session_id, status=status, error=error, epoch=epoch)
            if notify:
                queue_notice(pipe, tenant, run_id, status)
            try:
                replies = await pipe.execute()
            except Exception:
                await self.reinstate(tenant, run_id)
                raise
        return replies[place] == 1

    async def reinstate(self, tenant: str, run_id: str) -> None:
        """After an end that may not have been stored: the run back in the active set, due when its lease runs
        out, so a replica takes it over (or, if it ended after all, drops it). On a Redis Cluster the end's round
        trip spans nodes (its script on the run's, the active set on another's), and one may fail alone, taking
        a run that still runs out of the set, where no reaper would find it."""
        try:
            await self.redis.zadd(keys.ACTIVE_RUNS, {f"{tenant}/{run_id}": time.time() + self.lease_s})
        except Exception:
            log.warning("run %s: could not keep it in the active set after its end failed", run_id, exc_info=True)

    async def append_log(self, tenant: str, run_id: str, kind: str, entries: list[dict]) -> None:
        """A run's trace of one `kind` (LOG_KINDS), kept as long as the run record. (A run's owner stores its
        trace with its end, `queue_finish`.)"""
        if entries:
            key = keys.run_log(tenant, run_id, kind)
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.rpush(key, *(dump_bytes(e) for e in entries))
                pipe.expire(key, self.ttl_s)
                await pipe.execute()

    async def read_log(self, tenant: str, run_id: str, kind: str) -> list[dict]:
        return [json.loads(raw) for raw in await self.redis.lrange(keys.run_log(tenant, run_id, kind), 0, -1)]

    async def status(self, tenant: str, run_id: str) -> dict[str, str]:
        return _decode(await self.redis.hgetall(keys.run(tenant, run_id)))

    async def settled(self, tenant: str, run_id: str) -> None:
        """Wait while a running run has no live owner, or its new owner is still cleaning up its stream: what a
        reader gets then is final (the half-sent output of the interrupted components is gone)."""
        while True:
            info = await self.status(tenant, run_id)
            if info.get("status") != "running" or (
                    info.get("resuming") != "1" and await self.redis.exists(keys.run_lease(run_id))):
                return
            await asyncio.sleep(min(0.1, self.lease_s / 4))

    async def follow(self, tenant: str, run_id: str, after_seq: int = 0) -> AsyncIterator[tuple[int, dict[bytes, bytes]]]:
        """The run's stored events after `after_seq` once they are final (`settled`), then its live tail, as
        (seq, fields); it ends when the run ended and nothing is left (a rejoin: WatchRun, or a caller whose
        replica lost the run, runs/pump.py)."""
        await self.settled(tenant, run_id)
        async for seq, fields in tail_events(self.redis, tenant, run_id, after_seq):
            if not seq:  # nothing new for a while: stop if the run ended without a last event to send
                status = (await self.status(tenant, run_id)).get("status", "")
                if status in TERMINAL or status == "waiting_for_user":
                    if not await read_events(self.redis, tenant, run_id, after_seq, count=1):
                        return
                continue
            after_seq = seq
            yield seq, fields

    async def set_fields(self, tenant: str, run_id: str, **values: Any) -> None:
        await self.redis.hset(keys.run(tenant, run_id), mapping=values)

    async def list_for_session(self, tenant: str, session_id: str, limit: int = 100) -> list[tuple[str, dict[str, str]]]:
        """The session's runs, newest first, with their records (expired ones left out)."""
        ids = [r.decode() for r in await self.redis.zrange(keys.session_runs(tenant, session_id), 0, limit - 1, desc=True)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in ids:
                pipe.hgetall(keys.run(tenant, run_id))
            records = await pipe.execute()
        return [(run_id, _decode(raw)) for run_id, raw in zip(ids, records) if raw]

    async def request_cancel(self, tenant: str, *, run_id: str = "", session_id: str = "") -> bool:
        """True when a running (or waiting) run was found and stopped. A run whose owner is gone, or that waits
        for the user, is cancelled here and now, so its session is free at once."""
        if not run_id and session_id:
            found = await self.redis.get(keys.session_active_run(tenant, session_id))
            run_id = found.decode() if found else ""
            if not run_id:
                found = await self.redis.hget(keys.session(tenant, session_id), "paused_run")
                run_id = found.decode() if found else ""
        if not run_id:
            return False
        info = await self.status(tenant, run_id)
        status = info.get("status")
        if status == "waiting_for_user":
            await self.end_pause(tenant, run_id, info.get("session_id", ""), status="cancelled",
                                 error="Task has been canceled")
            return True
        if status != "running":
            return False
        await self.redis.set(keys.cancel_flag(run_id), "1", ex=CANCEL_TTL_S)
        await self.redis.publish(keys.CANCEL_CHANNEL, run_id)
        if not await self.redis.exists(keys.run_lease(run_id)):  # nobody runs it: no one else will free it
            await self.finish(tenant, run_id, info.get("session_id", ""), status="cancelled", error="Task has been canceled")
        return True

    async def end_pause(self, tenant: str, run_id: str, session_id: str, *, status: str, error: str) -> None:
        """End a run that waits for the user (cancelled, or its wait expired): its end, and its session no
        longer paused at it."""
        await self.finish(tenant, run_id, session_id, status=status, error=error)
        await self._unpause(tenant, session_id, run_id)

    async def _unpause(self, tenant: str, session_id: str, run_id: str) -> None:
        if session_id:
            key = keys.session(tenant, session_id)
            if (await self.redis.hget(key, "paused_run") or b"").decode() == run_id:
                await self.redis.hset(key, "paused_run", "")

    async def is_cancelled(self, run_id: str) -> bool:
        return bool(await self.redis.exists(keys.cancel_flag(run_id)))
