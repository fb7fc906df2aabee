"""Where a run resumes from its checkpoint, without running again anything that finished.

Two ways: a run paused at a UserFillUp is answered by the next request on its session that carries `inputs`
(a new run, parent = the paused one, from a copy of its checkpoint); a run whose replica died is taken over by
another replica's reaper (runs/leases.py) and resumed in place (same run id, same stream; what did not finish
runs again and its half-sent events are dropped from the stream), or failed with the reason. A take-over moves
the run to a new epoch, which every write of it checks (store/runs.py): a take-over that finds another replica
took the run over again meanwhile stops quietly.
"""

from __future__ import annotations

import json
import logging

from services.common.errors import FailedPrecondition, InvalidArgument
from services.orchestrator.components.user_fill_up import missing_fields
from services.orchestrator.engine import events as ev
from services.orchestrator.engine.checkpoint import NodeRecord, Replay
from services.orchestrator.engine.state import SessionState
from services.orchestrator.runs.pump import Pump, PumpServices, Resume
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.runs.starts import RunStarts
from services.orchestrator.runs.turn_record import TurnRecord
from services.orchestrator.store import RunStore, SessionRecord, SessionStore
from services.orchestrator.store.journal import RunLost, copy_checkpoint, drop_unfinished, read_checkpoint, read_events
from services.orchestrator.store.runs import FIRST_EPOCH

log = logging.getLogger(__name__)

# How far past the last stored event a taken-over run's events are numbered: more than a replica can have sent
# its callers without storing (at most what it produced during its journal's last writes).
TAKE_OVER_GAP = 100_000


class RunResumes:
    def __init__(self, sessions: SessionStore, runs: RunStore, starts: RunStarts, pumps: PumpServices, *,
                 max_attempts: int = 3) -> None:
        self.sessions = sessions
        self.runs = runs
        self.starts = starts
        self.pumps = pumps
        self.max_attempts = max_attempts  # a run resumed this many times after crashes is failed instead

    async def answer_pause(self, spec: RunSpec, record: SessionRecord) -> Pump:
        """The session waits at a UserFillUp: this request's `inputs` answer it, in a new run from a copy of the
        paused run's checkpoint (nothing that finished runs again, Begin included)."""
        parent_id = record.paused_run
        parent = await self.runs.status(spec.tenant_id, parent_id)
        waiting = parent.get("paused_node", "")
        if parent.get("status") != "waiting_for_user" or not waiting:
            await self.sessions.set_paused_run(spec.tenant_id, record.id, "")
            return await self.starts.start_new(spec, record)
        parent_spec = RunSpec.from_json(json.loads(parent.get("spec") or "{}"))
        plan = await self.starts.plan(parent_spec, record)
        component = waiting.rsplit("/", 1)[-1]
        if not spec.inputs:
            raise InvalidArgument(f"session {record.id!r} is waiting for the user's input to {component}: "
                                  "send the answers as `inputs`, or cancel the run")
        missing = missing_fields(plan.component_params(component), spec.inputs)
        if missing:
            raise InvalidArgument(f"{component}: inputs {', '.join(missing)} required to continue")
        spec.agent_id, spec.version_id, spec.dsl_json = record.agent_id, record.version_id, parent_spec.dsl_json
        spec.draft = parent_spec.draft
        spec.session_id = record.id
        state = record.state() or SessionState.fresh(plan.variables)
        tenant = spec.tenant_id
        await self.runs.start(tenant, spec.run_id, record.id, spec.agent_id, spec=spec.to_json(),
                              parent_run_id=parent_id)
        await self.runs.set_fields(tenant, spec.run_id, resume_node=waiting)
        await copy_checkpoint(self.runs.redis, tenant, parent_id, spec.run_id, FIRST_EPOCH, self.runs.ttl_s)
        # the paused run's end was noticed (waiting_for_user); what follows is this new run's, noticed at its end
        await self.runs.finish(tenant, parent_id, "", status="succeeded", notify=False)
        await self.runs.set_fields(tenant, parent_id, resumed_by=spec.run_id)
        await self.sessions.set_paused_run(tenant, record.id, "")
        records = [NodeRecord.from_json(r) for r in await read_checkpoint(self.runs.redis, tenant, spec.run_id)]
        pump = Pump(self.pumps, spec, plan, state, resume=Resume(Replay(records, {waiting: spec.inputs})))
        pump.attach()  # before its first event: the caller gets every one
        return pump

    async def take_over(self, tenant: str, run_id: str, attempt: int) -> None:
        """Resume a run whose replica died, in place, or fail it with the reason and free its session. `attempt`
        is the take-over's (store/runs.py `take_over`): the epoch this replica holds the run at."""
        info = await self.runs.status(tenant, run_id)
        session_id = info.get("session_id", "")
        try:
            if attempt > self.max_attempts:
                raise FailedPrecondition(f"resume attempts used up ({self.max_attempts})")
            spec = RunSpec.from_json(json.loads(info.get("spec") or "{}"))
            record = await self.sessions.get(tenant, session_id, messages=False) if session_id else None
            if session_id and not await self.runs.claim_session(tenant, session_id, run_id, attempt):
                raise FailedPrecondition("its session took another run meanwhile")
            plan = await self.starts.plan(spec, record)
            state = (record.state() if record is not None else None) or SessionState.fresh(plan.variables)
            records = [NodeRecord.from_json(r) for r in await read_checkpoint(self.runs.redis, tenant, run_id)]
            last_seq, restarted = await drop_unfinished(self.runs.redis, tenant, run_id, attempt)
            turn = TurnRecord()
            answer: list[str] = []  # what the stored stream already answered: the engine's answer starts from it
            for _, fields in await read_events(self.runs.redis, tenant, run_id, 0, count=100_000):
                event = self.pumps.codec.decode(fields[b"e"])
                turn.observe(event)
                if event.__class__ is ev.MessageDelta and not event.path:
                    answer.append(event.content)
            resume_node = info.get("resume_node", "")
            replay = Replay(records, {resume_node: spec.inputs} if resume_node else None, answer="".join(answer))
        except RunLost:  # taken over again meanwhile: it is the other replica's
            log.info("run %s: another replica took it over meanwhile; not resumed here", run_id)
            return
        except Exception as exc:  # NotFound (version or session deleted), FailedPrecondition, a broken record
            reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.warning("run %s cannot be resumed: %s", run_id, reason)
            await self.runs.finish(tenant, run_id, session_id, status="failed", error=f"cannot resume: {reason}",
                                   epoch=attempt)
            return
        # In place: its RunStarted is in the stream already, unless it died before its journal's first write.
        # Its new events are numbered after a gap: the dead replica may have sent its caller events it never
        # stored, and a caller rejoining after the last one it saw must still get every new one.
        Pump(self.pumps, spec, plan, state,
             resume=Resume(replay, in_place=last_seq > 0, first_seq=last_seq + 1 + TAKE_OVER_GAP, turn=turn,
                           restarted=restarted, epoch=attempt)).detach()
