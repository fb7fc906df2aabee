"""Bookkeeping of one execution of a scope (the top level, one Iteration item, one Loop pass)."""
from __future__ import annotations

import asyncio
from typing import Any

from services.orchestrator.engine.plan import BodyPlan
from services.orchestrator.engine.variables import Scope


class ScopeRun:
    """One execution of a scope (the top level, one Iteration item, one Loop pass)."""

    __slots__ = ("body", "scope", "path", "counts", "taken", "active", "done", "error", "tasks", "top", "paused")

    def __init__(self, body: BodyPlan, scope: Scope, path: tuple[str, ...], top: bool) -> None:
        self.body = body
        self.scope = scope
        self.path = path
        self.counts = body.indeg.copy()
        self.taken: set[str] = set()
        self.active = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: BaseException | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.top = top
        self.paused = False  # a component of this scope waits for the user

    def task_done(self, task: asyncio.Task[Any]) -> None:
        # A done-callback, not a `finally` in the coroutine: a task cancelled before its first
        # step never runs its body, and must still be counted out. A finished task leaves `tasks`: a cancelled
        # one keeps its CancelledError, whose traceback holds its frames, which hold this scope run (a cycle).
        self.tasks.discard(task)
        self.active -= 1
        if self.active == 0 and not self.done.done():
            self.done.set_result(None)

    def take_error(self) -> BaseException:
        """The scope's failure, to raise once its tasks are done; no longer kept here, so that the frame raising
        it (which holds this scope run) and the error's traceback (which holds that frame) make no cycle."""
        error, self.error = self.error, None
        assert error is not None
        return error

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
            me = asyncio.current_task()
            for t in self.tasks:
                if t is not me:
                    t.cancel()
