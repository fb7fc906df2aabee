"""Child runs: another agent of the same tenant, run from inside a run (the AgentCall component).

A child is an ordinary run of this orchestrator, started through `RunManager.execute` like any other: its own run
id, its own session (a new one, or the one the caller continues), journaled, cancellable, resumable. Its record
names its caller (`caller_run_id`, shown by GetRun and ListRuns), and the caller's trace names the child (the
AgentCall's outputs `run_id` and `session_id`).

- The tenant is the caller's, always: the engine passes its run's `RunRequest.tenant_id`, and an agent of another
  tenant is not found, as for any request.
- The child's stream is its caller's to hold: closing it before the child's end cancels the child (the run
  manager cancels a run whose caller goes away), so cancelling the calling run, or its component timing out,
  stops the child too; the child's end is stored before the caller's component ends.
- Nesting is bounded (`MAX_DEPTH`): an agent that calls itself fails at that depth instead of running forever.

The child runs on the replica of its caller. If that replica dies, each is taken over on its own: the caller runs
its AgentCall again (a new child), and the orphaned child finishes unattended (its caller no longer reads it).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any, AsyncIterator

from services.common.errors import FailedPrecondition
from services.orchestrator.engine import events as ev
from services.orchestrator.runs.manager import RunManager
from services.orchestrator.runs.spec import RunSpec

__all__ = ["MAX_DEPTH", "ManagedChildRuns"]

MAX_DEPTH = 5  # child of a child of ...: runs above a run started by an AgentCall
QUEUE_SIZE = 64  # a child's events read ahead of its caller
_END = object()


class ManagedChildRuns:
    """`engine.settings.ChildRuns` on the run manager of this replica."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager

    def _depth(self, run_id: str) -> int:
        caller = self.manager.local.get(run_id)  # the caller runs here: its component is asking
        return caller.spec.call_depth if caller is not None else 0

    async def run(self, *, tenant_id: str, agent_id: str, query: str, inputs: dict[str, Any], parent_run_id: str,
                  session_id: str = "", user_id: str = "") -> AsyncIterator[ev.Event]:
        depth = self._depth(parent_run_id) + 1
        if depth > MAX_DEPTH:
            raise FailedPrecondition(f"agent {agent_id!r} would be called {depth} levels deep: agents calling "
                                     f"agents stop at {MAX_DEPTH} (does an agent call itself?)")
        spec = RunSpec(tenant_id=tenant_id, agent_id=agent_id, session_id=session_id, query=query, inputs=inputs,
                       user_id=user_id, create_session=not session_id, answer_only=True,
                       caller_run_id=parent_run_id, call_depth=depth)
        # The child's stream is read by a task of its own: a cancel of the caller reaches this frame first, so the
        # child is cancelled with the reason before its stream is closed (which cancels it as "client disconnected").
        events: asyncio.Queue = asyncio.Queue(QUEUE_SIZE)
        reader = asyncio.create_task(self._read(spec, events), name=f"child-of-{parent_run_id}")
        ended = False
        try:
            while (item := await events.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                ended = item.__class__ is ev.RunFinished
                yield item
        finally:
            if not ended and spec.run_id:  # the caller went away first: say why in the child's record
                pump = self.manager.local.get(spec.run_id)
                if pump is not None:
                    pump.cancel(f"its caller, run {parent_run_id}, stopped")
            reader.cancel()  # closes the child's stream: the manager cancels it and waits for its end
            await asyncio.wait([reader])

    async def _read(self, spec: RunSpec, events: asyncio.Queue) -> None:
        try:
            async with aclosing(self.manager.execute(spec)) as stream:
                async for item in stream:
                    await events.put(item.event)
        except Exception as exc:  # refused (not found, busy session...): the caller raises it
            await events.put(exc)
            return
        await events.put(_END)
