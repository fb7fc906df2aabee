"""Run a compiled plan and stream its events: the engine's public surface.

    async for event in run(plan, RunRequest(run_id=..., query=...), state, services):
        ...

`start` gives the one owner of a run's stream (the run's pump, runs/pump.py) its batches; `run` yields the
events one by one. The scheduling itself (dataflow: a node starts the moment its inputs are resolved, a join
runs once, no batch barrier) is `_execution.py`. Cancelling the consumer (or `aclose()`) cancels every
running component.
"""
from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any, AsyncIterator

from services.orchestrator.engine._execution import Execution, NodeFailed, Ownership, RunPaused
from services.orchestrator.engine.checkpoint import Replay
from services.orchestrator.engine.events import RunFinished
from services.orchestrator.engine.plan import Plan
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest, SessionState
from services.orchestrator.engine.validate import ValidationFailed, compile_plan

__all__ = ["NodeFailed", "Ownership", "RunPaused", "RunRequest", "Running", "ValidationFailed", "compile_plan", "run",
           "start"]



class Running:
    """A started run, for the one owner of its event stream (the run manager, or `run()`): `batches()` hands
    over everything the engine produced since the previous batch, RunFinished last; `cancel()` stops it (it
    still ends with RunFinished(cancelled=True)); `answer` is the turn's answer, collected here once (the
    top-level MessageDelta texts, after what a resumed run had already said)."""

    __slots__ = ("_ex", "_driver", "_cancelled")

    def __init__(self, ex: Execution) -> None:
        self._ex = ex
        self._driver: asyncio.Future[None] | None = None
        self._cancelled = False

    @property
    def answer(self) -> str:
        return "".join(self._ex.answer)

    def cancel(self) -> None:
        self._cancelled = True
        if self._driver is not None:
            # Soon, not now: a driver cancelled before its first step never runs, so it would never end its
            # stream with RunFinished (its first step is already scheduled, so it comes first).
            asyncio.get_running_loop().call_soon(self._driver.cancel)

    async def batches(self) -> AsyncIterator[list[Any]]:
        """Close it (or cancel its reader) to cancel the run: what runs is cancelled and waited for."""
        ex = self._ex
        driver = self._driver = asyncio.ensure_future(ex.drive())
        if self._cancelled:  # cancelled before it started: once it has started, so that it ends itself
            asyncio.get_running_loop().call_soon(driver.cancel)
        try:
            buf = ex.buf
            while True:
                if buf:
                    batch = list(buf)
                    buf.clear()
                    yield batch
                    if batch[-1].__class__ is RunFinished:
                        return
                    continue
                if driver.done():
                    driver.result()  # surfaces an engine bug instead of hanging
                    return
                await ex.wait_event()
        finally:
            if not driver.done():
                driver.cancel()
                await asyncio.gather(driver, return_exceptions=True)
            if driver.done():
                ex.release()


def start(plan: Plan, request: RunRequest, state: SessionState | None = None, services: Services | None = None, *,
          replay: Replay | None = None, checkpoints: bool = False, ownership: Ownership | None = None) -> Running:
    """A run of `plan`, started when its `batches()` are first read. With `checkpoints`, a `NodeRecord` follows
    every finished or pruned component's event; `replay` resumes from the records of an earlier attempt
    (checkpoint.py); `ownership` is asked before each component starts."""
    state = state if state is not None else SessionState.fresh(plan.variables)
    return Running(Execution(plan, request, state, services or Services(), replay, checkpoints, ownership))


async def run(plan: Plan, request: RunRequest, state: SessionState | None = None,
              services: Services | None = None, *, replay: Replay | None = None,
              checkpoints: bool = False) -> AsyncIterator[Any]:
    """Run `plan` and yield its events one by one; RunFinished is always the last one (see `start`).

    Closing the generator or cancelling its consumer cancels the run.
    """
    running = start(plan, request, state, services, replay=replay, checkpoints=checkpoints)
    async with aclosing(running.batches()) as batches:
        async for batch in batches:
            for event in batch:
                yield event
