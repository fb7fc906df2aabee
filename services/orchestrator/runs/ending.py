"""Where a run ends: the journal's last batch, the turn in its session, its trace and its status, in one round trip.

When that round trip fails, the journal stores its batch with its own retries, then the turn is stored on its
own. Every write of it is fenced (store/runs.py): a replica that lost the run meanwhile (another took it over)
stores none of it, and the same end sent twice (its reply lost) is stored once. A session's state keeps what
later turns read, not everything ever seen (`compact`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from services.orchestrator import metrics
from services.orchestrator.engine.state import SessionState
from services.orchestrator.store import RunStore, SessionStore
from services.orchestrator.store.journal import RunLost
from services.orchestrator.store.outbox import queue_notice
from services.orchestrator.store.sessions import message

if TYPE_CHECKING:
    from services.orchestrator.runs.pump import Pump

log = logging.getLogger(__name__)

# RAGFlow reads only the last retrieval slot, and history is bounded (components trim it further to their window).
KEEP_RETRIEVAL = 1
KEEP_HISTORY = 200
KEEP_PATH = 1000


class RunEnding:
    def __init__(self, sessions: SessionStore, runs: RunStore) -> None:
        self.sessions = sessions
        self.runs = runs

    async def store(self, pump: Pump) -> bool:
        """The run's end, once its pump stopped. False when another replica took the run over before it was
        stored (or it had ended already): the end is not this replica's to tell (the run's stream has it)."""
        try:
            await pump.journal.settle()  # (again, after a cancel): nothing in flight, the pending batch comes last
            settled = True
        except RunLost:  # another replica owns the run: its end is that one's to store
            log.info("run %s: not ended here: another replica took it over", pump.run_id)
            return False
        except Exception:  # the journal gave up; aclose says so below
            settled = False
        metrics.RUNS.labels(pump.turn.status).inc()
        stored = await self._store(pump, with_journal=settled)
        try:
            await pump.journal.aclose()
        except RunLost:
            return False
        except Exception:
            log.warning("run %s: journal not fully stored", pump.run_id, exc_info=True)
        if stored is None:
            stored = await self._store(pump, with_journal=False)
        return stored is not False

    async def _store(self, pump: Pump, *, with_journal: bool) -> bool | None:
        """The turn, the run's trace and its end (and `with_journal`, the journal's pending batch first), in one
        round trip. Whether it was ended here (False: another replica took the run over, or it had ended), or
        None when it did not reach Redis. The journal's batch counts as written unless its reply is an error
        and the stream does not have it (then the journal's `aclose` writes it)."""

        spec, turn, tenant = pump.spec, pump.turn, pump.spec.tenant_id
        messages = [message("user", spec.query)] if spec.query else []
        text = turn.text()
        if text:
            messages.append(message("assistant", text, turn.reference, message_id=pump.run_id))
        compact(pump.state)
        paused = pump.run_id if turn.status == "waiting_for_user" else ""
        try:
            async with self.runs.redis.pipeline(transaction=False) as pipe:
                journaled = with_journal and pump.journal.queue_pending(pipe)
                self.sessions.queue_save_turn(pipe, tenant, pump.session_id, messages, pump.state,
                                              run_id=pump.run_id, epoch=pump.epoch, paused_run=paused)
                if paused and (expires_at := _expires_at(pump, turn.waiting_for)):
                    self.runs.queue_pause_expiry(pipe, tenant, pump.run_id, expires_at)
                ended = self.runs.queue_finish(pipe, tenant, pump.run_id, pump.session_id, status=turn.status,
                                               error=turn.error, epoch=pump.epoch,
                                               tool_calls=list(turn.tool_calls.values()), thoughts=turn.thoughts,
                                               paused_node=turn.waiting_for if paused else "")
                if spec.agent_id or spec.completion_webhook:  # its completion webhooks and A2A pushes
                    queue_notice(pipe, tenant, pump.run_id, turn.status)  # (triggers/webhooks_out.py)
                replies = await pipe.execute(raise_on_error=False)
        except Exception:
            await self.runs.reinstate(tenant, pump.run_id)  # (a cluster: the active set's node may have said yes)
            if with_journal:  # the journal's own retries store its batch; then the turn goes alone
                log.warning("run %s: storing its end failed; retrying", pump.run_id, exc_info=True)
            else:
                log.exception("could not store the end of run %s of session %s", pump.run_id, pump.session_id)
            return None
        if journaled:
            if not isinstance(replies[0], Exception) or await pump.journal.pending_stored():
                pump.journal.pending_written()  # (sent twice, its reply lost the first time: an error, stored once)
            else:
                log.warning("run %s: storing its last events failed (%s); retrying", pump.run_id, replies[0])
        saved = replies[1 if journaled else 0]
        if saved == 0:
            log.warning("run %s: session %s was deleted meanwhile; its turn was not stored", pump.run_id,
                        pump.session_id)
        elif saved == -1:
            log.info("run %s: its turn was not stored here: another replica took the run over, or stored it "
                     "already", pump.run_id)
        if isinstance(replies[ended], Exception):
            await self.runs.reinstate(tenant, pump.run_id)
        lost = replies[ended] == 0 or (journaled and replies[0] == 0)
        if lost:
            log.info("run %s: not ended here: another replica took it over (or it ended already)", pump.run_id)
        for reply in replies[1:] if journaled else replies:
            if isinstance(reply, Exception):
                log.error("run %s: storing its end failed: %s", pump.run_id, reply)
        return not lost


def _expires_at(pump: Pump, node: str) -> float:
    """When the wait of a run paused at `node` expires: its UserFillUp's `timeout_s` from now (0: never); the
    index of pauses by expiry (runs/interrupts.py `expire`) reads it."""
    timeout = float(pump.plan.component_params(node.rsplit("/", 1)[-1]).get("timeout_s") or 0)
    return time.time() + timeout if timeout > 0 else 0.0


def compact(state: SessionState) -> None:
    """Drop what no later turn reads from a session's state."""
    if isinstance(state.retrieval, list):
        state.retrieval[:] = state.retrieval[-KEEP_RETRIEVAL:]
    state.history[:] = state.history[-KEEP_HISTORY:]
    hist = state.globals.get("sys.history")
    if isinstance(hist, list):
        state.globals["sys.history"] = hist[-KEEP_HISTORY:]
    state.path[:] = state.path[-KEEP_PATH:]

