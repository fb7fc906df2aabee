"""One run on this replica: engine -> numbered stream -> journal -> caller (when attached) -> the run's end.

The pump is the one owner of its run's stream. It reads the engine's events in batches (runner.start), numbers
each (runs/stream.py), hands it to the run's journal in Redis (event stream + checkpoint, store/journal.py)
and to the caller, if one is attached, then has the run's end stored (runs/ending.py). The engine ends every
run with its own RunFinished; the pump ends it only when the engine could not (events.run_failed). The caller
reads from a bounded queue.

The pump drives its run while this replica owns it, at the epoch it started or took it over at (store/runs.py).
When the replica loses it (its lease renewal or one of its writes is refused: another replica took the run
over while this one was stalled), the pump stops quietly (`abandon`): nothing more of it is written, and a
caller attached here goes on with the run's stored stream as the new owner writes it, with no error. Before a
component starts, the engine asks the pump whether the run is still its own (`owns`, by the lease's own clock:
runs/leases.py), so an owner that lost the run calls out to nothing more.

The caller hears the run's end (its RunFinished) only once that end is stored under this replica's epoch: an
owner that lost the run before must not tell its caller an end (and answers) the run's new owner tells
differently. What the caller saw of a component that the new owner then runs again is followed by that
component's restart (its NodeStarted says `restarted`), so a client drops it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable

from services.common.inbox import Inbox
from services.orchestrator import metrics
from services.orchestrator.engine import events as ev
from services.orchestrator.engine.checkpoint import NodeRecord, Replay, node_key
from services.orchestrator.engine.plan import Plan
from services.orchestrator.engine.runner import Running
from services.orchestrator.engine.runner import start as start_engine
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest, SessionState
from services.orchestrator.runs.ending import RunEnding
from services.orchestrator.runs.leases import SURE
from services.orchestrator.runs.local import LocalRuns
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.runs.stream import EventCodec, Numbered, merge_batch
from services.orchestrator.runs.turn_record import TurnRecord
from services.orchestrator.store.journal import JournalWriter, RunJournal, RunLost
from services.orchestrator.store.runs import FIRST_EPOCH, RunStore

log = logging.getLogger(__name__)

QUEUE_SIZE = 256
END = object()  # the last item of a caller's queue


@dataclass(frozen=True)
class PumpServices:
    """What every pump of a replica works with."""

    runs: RunStore
    engine: Services
    journals: JournalWriter
    codec: EventCodec
    ending: RunEnding
    local: LocalRuns
    first_write_delay: Callable[[], float]  # the journal policy's delay for a run starting now, in seconds
    renew: Callable[[], Awaitable[None]]  # renews every lease of this replica now (runs/leases.py `Renewal.now`)


@dataclass
class Resume:
    """Where a run starts from when it does not start afresh."""

    replay: Replay
    in_place: bool = False  # a crashed run resumed under its own id: its RunStarted is in the stream already
    first_seq: int = 1
    turn: TurnRecord | None = None  # what the stored stream already told of the turn
    # Components (`node_key`) whose half-sent events were dropped from the stream: each one's next NodeStarted
    # says `restarted`, so a client that saw part of its output drops it.
    restarted: set[str] = field(default_factory=set)
    epoch: int = FIRST_EPOCH  # the epoch this replica holds the run at (its attempt number)


class Pump:
    def __init__(self, services: PumpServices, spec: RunSpec, plan: Plan, state: SessionState, *,
                 resume: Resume | None = None, cancelled: bool | None = None) -> None:
        """`cancelled`: whether a cancel came before the start, when the caller knows (else it is asked)."""
        self.services = services
        self.spec = spec
        self.run_id = spec.run_id
        self.session_id = spec.session_id
        self.plan = plan
        self.state = state
        self.replay = resume.replay if resume else None
        self.in_place = resume.in_place if resume else False
        self.seq = (resume.first_seq if resume else 1) - 1
        self.turn = (resume.turn if resume else None) or TurnRecord()
        self.restarted = set(resume.restarted) if resume else set()
        self.epoch = resume.epoch if resume else FIRST_EPOCH
        self._given = 0  # the seq of the last event put in the caller's queue
        self._shown: set[str] = set()  # components (`node_key`) the caller was given a NodeStarted of
        self._end: Numbered | None = None  # the engine's RunFinished, for the caller once the end is stored
        # Until when the run is surely this replica's, by its own clock (runs/leases.py; renewals move it on).
        self.lease_until = time.monotonic() + services.runs.lease_s * SURE
        self.out: Inbox | None = None  # the attached caller's events (an Inbox: 3 KB less than a Queue per run)
        self._for_caller = ev.ANSWER_EVENTS if spec.answer_only else None  # None: every event
        self.started = time.time()
        self.journal = RunJournal(services.journals, spec.tenant_id, spec.run_id, epoch=self.epoch,
                                  on_lost=self._lost, first_write_delay_s=services.first_write_delay())
        self.engine: Running | None = None
        self._cancel_asked = False  # the engine stops and sends its own closing RunFinished(cancelled)
        self._cancelled_early = cancelled
        self._stop_reason = ""
        self._abandoned = False
        self._rejoin: asyncio.Future | None = None  # the caller's rejoin once this replica lost the run
        self.finishing = False  # storing the run's end: the lease is released on purpose
        self.task = asyncio.create_task(self._run(), name=f"run-{spec.run_id}")
        services.local.add(self)

    # ------------------------------------------------------------------ the caller's side
    def attach(self) -> Inbox:
        if self.out is None:
            self.out = Inbox(QUEUE_SIZE)
        return self.out

    def detach(self) -> None:
        """The caller went away but the run goes on; its events stay in the stream."""
        out, self.out = self.out, None
        if self._rejoin is not None:
            self._rejoin.cancel()
        if out is not None:
            while not out.empty():  # unblock a put waiting on the caller's full queue
                out.get_nowait()

    def cancel(self, reason: str = "") -> None:
        self._stop_reason = self._stop_reason or reason
        self._cancel_asked = True
        if self.engine is not None:
            self.engine.cancel()

    @property
    def abandoned(self) -> bool:
        """Whether this replica stopped driving the run (another one owns it now)."""
        return self._abandoned

    def abandon(self) -> None:
        """Another replica owns the run now: stop here without writing its end or its journal. An attached
        caller is not told an error: once what it was given here is read, it gets the run's stored stream after
        the last event it was given, as the new owner writes it, to the run's end (a rejoin, as WatchRun's).
        What this replica gave it of a component that had not finished is followed by that component's
        restart (its NodeStarted says `restarted`)."""
        if self._abandoned:
            return
        self._abandoned = True
        self.journal.abort()
        if asyncio.current_task() is not self.task:
            self.task.cancel()
        if self.out is not None:
            self._rejoin = asyncio.ensure_future(self._follow_elsewhere(self.out, self._given))

    def _lost(self) -> None:
        """The journal's write was refused: another replica took the run over (its end, if it is being stored
        already, stores nothing: runs/ending.py)."""
        if not self.finishing and not self.task.done():
            log.warning("run %s: a write was refused: another replica took it over (this one held epoch %d); "
                        "stopping here", self.run_id, self.epoch)
            self.abandon()

    async def _follow_elsewhere(self, out: Inbox, after: int) -> None:
        """`abandon`'s rejoin for the caller of `out`, after its event `after`, while it stays attached. What
        this replica gave the caller may not have been stored: a component it showed the start of, which the
        new owner runs again, starts again for the caller (`restarted`)."""
        try:
            async for seq, fields in self.services.runs.follow(self.spec.tenant_id, self.run_id, after):
                event = self.services.codec.decode(fields[b"e"])
                if event.__class__ is ev.NodeStarted and self._shown:
                    key = node_key(event.path, event.node_id)
                    if key in self._shown:
                        self._shown.discard(key)
                        event = replace(event, restarted=True)
                if self._for_caller is None or event.__class__ in self._for_caller:
                    await out.put(Numbered(seq, event))
        except Exception as exc:  # Redis unreachable: the caller is told to rejoin by itself
            log.warning("run %s: following it for its caller failed: %s", self.run_id, exc)
            for event in self._failed("the run moved to another replica: rejoin it (WatchRun, or Last-Event-ID "
                                      "over HTTP)", "moved"):
                await out.put(Numbered(0, event))  # not in the stream: a rejoin starts after what it saw
        await out.put(END)

    # ------------------------------------------------------------------ the run
    async def _run(self) -> None:
        try:
            await self._drive()
        finally:
            # Over here (`_lost` does nothing once the task is done): the journal's callback is the last
            # reference back to this pump, a cycle that would keep the run's objects until a full collection.
            self.journal.on_lost = None

    async def _drive(self) -> None:
        held: Numbered | None = None  # a NodeFinished, journaled together with its checkpoint record (next)
        try:
            early = self._cancelled_early
            if early or (early is None and await self.services.runs.is_cancelled(self.run_id)):
                self._cancel_asked = True  # cancelled before it started: the engine ends it at once
            self.engine = start_engine(self.plan, self._request(), self.state, self.services.engine,
                                       replay=self.replay, checkpoints=True, ownership=self)
            if self._cancel_asked:
                self.engine.cancel()
            broke = False
            try:
                async with aclosing(self.engine.batches()) as batches:
                    async for batch in batches:
                        for item in merge_batch(batch):
                            if item.__class__ is NodeRecord:
                                if held is not None:
                                    self._journal(held, item.to_json())
                                    held = None
                                continue
                            if held is not None:  # no record followed (not expected): store it alone
                                self._journal(held)
                                held = None
                            if item.__class__ is ev.RunStarted and self.in_place:
                                continue
                            if self.restarted and item.__class__ is ev.NodeStarted:
                                item = self._restart(item)
                            if item.__class__ is ev.NodeFinished:
                                held = self._number(item)
                                if not item.skipped:
                                    metrics.component_finished(item.component_type, item.error is not None,
                                                               item.elapsed_s)
                                await self._deliver(held)
                            else:
                                await self._emit(item)
            except Exception:  # a bug: the engine ends every run with its own RunFinished otherwise
                log.exception("engine failed in run %s", self.run_id)
                broke = True
            if held is not None:
                self._journal(held)
                held = None
            if broke:
                for event in self._failed("internal error in the engine; see the orchestrator log", "internal"):
                    await self._emit(event)
            await self.journal.settle()  # the last batch is stored with the run's end
        except asyncio.CancelledError:
            if self._abandoned:
                return
            self.turn.ended("cancelled", self._stop_reason or "Task has been canceled")
        except RunLost:  # (its journal has told it, unless the refusal came just now)
            self.abandon()
        except Exception as exc:  # the journal gave up (Redis unreachable): stop with a clear error
            self.turn.ended("failed", str(exc))
            self._end = None
            out = self.out
            for event in self._failed(str(exc), "internal"):  # for the caller only: nothing can be stored
                item = self._number(event)
                if out is not None and not out.full():
                    out.put_nowait(item)
        finally:
            if self.engine is not None:
                self.turn.answer = self.engine.answer
            if self.turn.status == "cancelled" and self._stop_reason:
                self.turn.error = self._stop_reason
            if not self._abandoned:
                self.finishing = True
                end = asyncio.ensure_future(self.services.ending.store(self))
                self.services.local.ending(end)
                ended_here = await asyncio.shield(end)
                if self.out is not None:
                    if not ended_here:  # another replica took the run over first: its end is the caller's
                        self.abandon()
                    else:
                        if self._end is not None:
                            await self._deliver(self._end)
                        await self.out.put(END)

    # ------------------------------------------------------------------ ownership (the engine's runner.Ownership)
    def owns(self) -> bool:
        return time.monotonic() < self.lease_until

    async def confirm(self) -> None:
        """The run's lease may have lapsed by this replica's clock (it was paused, cut off or stalled): renew it
        before a component starts; stop here when another replica took the run over meanwhile. While Redis
        cannot be reached, the component waits."""
        while not self.owns():
            await self.services.renew()
            if self._abandoned:
                raise asyncio.CancelledError(f"run {self.run_id} is owned by another replica now")
            if not self.owns():
                await asyncio.sleep(min(1.0, self.services.runs.lease_s / 10))

    def _restart(self, event: ev.NodeStarted) -> ev.NodeStarted:
        """The first NodeStarted of a component whose earlier events were dropped on a take-over, flagged."""
        key = node_key(event.path, event.node_id)
        if key not in self.restarted:
            return event
        self.restarted.discard(key)
        return replace(event, restarted=True)

    def _request(self) -> RunRequest:
        spec = self.spec
        return RunRequest(run_id=self.run_id, session_id=self.session_id, query=spec.query, inputs=spec.inputs,
                          files=spec.files, user_id=spec.user_id, chat_template_kwargs=spec.chat_template_kwargs,
                          tenant_id=spec.tenant_id, overrides=spec.overrides, custom_header=spec.custom_header,
                          webhook_payload=spec.webhook_payload)

    def _number(self, event: ev.Event) -> Numbered:
        """The event's place in the run's stream, and what the turn keeps of it."""
        self.seq += 1
        self.turn.observe(event)
        return Numbered(self.seq, event)

    async def _emit(self, event: ev.Event) -> None:
        """Numbered, journaled, then to the caller: the one way an event enters the run's stream. The run's end
        waits for the caller until it is stored (`_run`)."""
        item = self._number(event)
        self._journal(item)
        if event.__class__ is ev.RunFinished:
            self._end = item
        else:
            await self._deliver(item)

    def _failed(self, message_text: str, code: str) -> list[ev.Event]:
        return ev.run_failed(self.run_id, self.session_id, message_text, code, time.time() - self.started)

    def _journal(self, item: Numbered, record: dict[str, Any] | None = None) -> None:
        event = item.event
        node = node_key(event.path, event.node_id) if event.node_id else ""
        self.journal.event(item.seq, functools.partial(self.services.codec.encode, item), node, record=record)

    async def _deliver(self, item: Numbered) -> None:
        out = self.out
        if out is not None and (self._for_caller is None or item.event.__class__ in self._for_caller):
            await out.put(item)
            self._given = item.seq
            if item.event.__class__ is ev.NodeStarted:
                self._shown.add(node_key(item.event.path, item.event.node_id))

