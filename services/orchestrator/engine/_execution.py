"""The scheduler of one run (runner.py is its public surface): dataflow on asyncio, events into a list.

A node starts the moment every in-scope upstream edge is resolved: taken (upstream finished and
routed here) or pruned (upstream skipped, or a Switch/goto chose another branch). It runs if at
least one edge was taken, otherwise it is skipped and the pruning propagates. So independent
branches overlap, a join runs exactly once, and there is no batch barrier.

Cost model: a finished node hands its first ready successor to the same task (a chain costs no task
switch) and spawns a task per extra ready successor. Events go to a list that the consumer drains.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from services.common import context as ctxvars
from services.orchestrator.components.base import NodeContext, Pause, Route, RunEnv
from services.orchestrator.engine._scope_run import ScopeRun as _ScopeRun
from services.orchestrator.engine.checkpoint import NodeRecord, Replay
from services.orchestrator.engine.events import (
    MessageDelta,
    NodeFinished,
    NodeStarted,
    RunError,
    RunFinished,
    RunStarted,
)
from services.orchestrator.engine.plan import BodyPlan, NodePlan, Plan
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest, SessionState
from services.orchestrator.engine.tracing import RunTrace, start_run
from services.orchestrator.engine.variables import Scope, to_jsonable, to_text
from services.orchestrator.engine.watchdog import Watchdog

log = logging.getLogger(__name__)
perf = time.perf_counter
now = time.time


class NodeFailed(Exception):
    """A component failed and no exception policy absorbed it: the run (or its container) fails."""

    def __init__(self, component_id: str, message: str, code: str = "component_failed") -> None:
        # Component errors often name their component already ("Invoke:Call: params.url: ..."): say it once.
        super().__init__(message if message.startswith(f"{component_id}:") else f"{component_id}: {message}")
        self.component_id = component_id
        self.message = message
        self.code = code


class RunPaused(Exception):
    """A component inside this container waits for the user: the container waits too, unfinished."""


class Ownership(Protocol):
    """Whether the process running the engine still owns the run (runs/pump.py, through its lease): a component
    starts only while it does, so what it calls out to is not called again by an owner that lost the run."""

    def owns(self) -> bool:
        """Surely still owned, by this process's own clock (no round trip)."""

    async def confirm(self) -> None:
        """Make sure it still is (a round trip); raises CancelledError when it is not (the run stops here)."""


class Execution:
    trace: RunTrace | None = None  # the run's spans (tracing.py), only while tracing is on

    def __init__(self, plan: Plan, request: RunRequest, state: SessionState, services: Services,
                 replay: Replay | None = None, checkpoints: bool = False,
                 ownership: Ownership | None = None) -> None:
        self.plan = plan
        self.request = request
        self.state = state
        self.services = services
        self.settings = services.settings
        self.buf: list[Any] = []  # not a deque: its first block is 0.7 KB per running run
        self.waiter: asyncio.Future[None] | None = None
        self.steps = 0
        self.answer: list[str] = []
        self.last_outputs: dict[str, Any] = {}
        self.env = RunEnv(run_id=request.run_id, session_id=request.session_id,
                          globals=state.globals, emit=self.emit, settings=services.settings,
                          services=services, request=request, known=plan.known, spawn=self._spawn_aux,
                          executor=self, display=plan.display, state=state)
        self.aux: set[asyncio.Task[Any]] = set()
        self._timeouts: dict[str, float | None] = {}
        self.watchdog = Watchdog()
        self.loop = asyncio.get_running_loop()
        self.replay = replay
        self.env.replay = replay
        if replay is not None and replay.answer:
            self.answer.append(replay.answer)
        self.checkpoints = checkpoints  # yield a NodeRecord after every finished or pruned component
        self.ownership = ownership  # runner.Ownership: asked before a component starts
        self.paused: list[str] = []  # components waiting for the user (UserFillUp)
        self._refs_seen = 0  # size of the run's references at the last record

    # ------------------------------------------------------------------ events
    def emit(self, ev: Any) -> None:
        self.buf.append(ev)
        if ev.__class__ is MessageDelta and not ev.path:  # the turn's answer, for the history
            self.answer.append(ev.content)
        if self.waiter is not None:
            self.emit_wake()

    def emit_wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    async def wait_event(self) -> None:
        self.waiter = w = asyncio.get_running_loop().create_future()
        await w

    def _spawn_aux(self, coro: Any) -> asyncio.Task[Any]:
        """Background work of a node (stream pumps); cancelled with the run."""
        t = asyncio.ensure_future(coro)
        self.aux.add(t)
        t.add_done_callback(self.aux.discard)
        return t

    # ------------------------------------------------------------------ the run
    async def drive(self) -> None:
        req = self.request
        t0 = perf()
        self.trace = start_run(req)
        self.emit(RunStarted.make(run_id=req.run_id, session_id=req.session_id, node_id="",
                                  timestamp=now(), inputs=to_jsonable(req.inputs)))
        error: str | None = None
        cancelled = False
        try:
            self.state.prepare_run(req, self.plan.variables)
            root = Scope(declared=self.plan.declared)
            await self.run_scope(self.plan.top, root, (), top=True)
        except NodeFailed as f:
            error = str(f)
            self._run_error(f.message, f.component_id, f.code)
        except asyncio.CancelledError:
            # Not an error event: RunFinished(cancelled=True) says it, as RAGFlow's workflow_finished does.
            cancelled = True
            error = "Task has been canceled"
        except Exception as exc:  # an engine bug must still end the stream cleanly
            log.exception("run %s: engine failure", req.run_id)
            error = f"internal error: {type(exc).__name__}"
            self._run_error(error, "", "internal")
        finally:
            self.watchdog.close()
            await self._cancel_aux()
        if error is None:
            self.state.add_assistant_message("".join(self.answer))
        self.emit(RunFinished.make(run_id=req.run_id, session_id=req.session_id, node_id="",
                                   timestamp=now(), outputs=to_jsonable(self.last_outputs),
                                   elapsed_s=perf() - t0, usage=dict(self.env.usage), error=error,
                                   cancelled=cancelled, waiting_for_user=bool(self.paused) and error is None))
        if self.trace is not None:
            self.trace.run_finished(error, cancelled, self.env.usage)

    def release(self) -> None:
        """The run is over: drop the references that close cycles (its env holds this execution, its owner holds
        it), so that the run's objects go as soon as they are unused instead of waiting, with everything they
        reach, for Python's next full collection (a long-lived process's memory would peak with them)."""
        self.ownership = None
        self.env = None  # type: ignore[assignment]  (the env's emit, spawn and executor point back here)

    def _run_error(self, message: str, component_id: str, code: str) -> None:
        self.emit(RunError.make(run_id=self.request.run_id, session_id=self.request.session_id,
                                node_id=component_id, timestamp=now(), message=message,
                                component_id=component_id, code=code))

    async def _cancel_aux(self) -> None:
        if self.aux:
            for t in list(self.aux):
                t.cancel()
            await asyncio.gather(*self.aux, return_exceptions=True)

    async def run_body(self, container_id: str, scope: Scope, path: tuple[str, ...]) -> None:
        await self.run_scope(self.plan.bodies[container_id], scope, path, top=False)

    async def run_scope(self, body: BodyPlan, scope: Scope, path: tuple[str, ...], *, top: bool) -> None:
        sr = _ScopeRun(body, scope, path, top)
        if not body.roots:
            return
        for r in body.roots:
            self._start_chain(sr, r)
        try:
            await sr.done
        except asyncio.CancelledError:
            sr.fail(asyncio.CancelledError())
            if sr.tasks:
                await asyncio.gather(*sr.tasks, return_exceptions=True)
            raise
        if sr.error is not None:
            raise sr.take_error()
        if sr.paused and not top:
            raise RunPaused()

    def _start_chain(self, sr: _ScopeRun, nid: str) -> None:
        self._track(sr, self.loop.create_task(self._chain(sr, nid)))

    @staticmethod
    def _track(sr: _ScopeRun, task: asyncio.Task[Any]) -> None:
        sr.active += 1
        sr.tasks.add(task)
        task.add_done_callback(sr.task_done)

    async def _chain(self, sr: _ScopeRun, nid: str | None) -> None:
        """Run nid, then its first ready successor in this same task, and so on."""
        task = asyncio.current_task()
        assert task is not None
        try:
            while nid is not None and sr.error is None:
                ready = await self._execute(sr, nid, task)
                if not ready:
                    break
                for extra in ready[1:]:
                    self._start_chain(sr, extra)
                nid = ready[0]
        except asyncio.CancelledError:
            if sr.error is None:  # cancelled from outside: let the owner see it
                raise
        except NodeFailed as exc:
            # Its message says it all; its traceback would hold the frames it came through, and they `sr`.
            sr.fail(exc.with_traceback(None))
        except BaseException as exc:
            sr.fail(exc)

    # ------------------------------------------------------------------ one node
    def _timeout(self, name: str) -> float | None:
        try:
            return self._timeouts[name]
        except KeyError:
            t = self._timeouts[name] = self.settings.timeout_for(name)
            return t

    async def _execute(self, sr: _ScopeRun, nid: str, task: Any) -> list[str]:
        node = sr.body.nodes[nid]
        self.steps += 1
        if self.steps > self.settings.max_steps:
            raise NodeFailed(nid, f"run exceeded max_steps={self.settings.max_steps} "
                             "(a runaway Loop?)", "max_steps")
        ctx = NodeContext(self.env, nid, node.name, node.params, sr.scope, sr.path)
        if self.replay is not None:
            record = self.replay.take(sr.path, nid)
            if record is not None:
                return self._restore(sr, node, ctx, record)
        ownership = self.ownership
        if ownership is not None and not ownership.owns():
            await ownership.confirm()  # (raises CancelledError once another process owns the run)
        ctxvars.node_id.set(nid)  # every log line the component writes names it
        env = self.env
        comp = node.component
        thoughts = ""
        if node.has_thoughts:
            try:
                thoughts = comp.thoughts(ctx)
            except Exception:  # a description must never fail a node
                log.debug("thoughts() of %s failed", nid, exc_info=True)
        ev = NodeStarted.make(run_id=env.run_id, session_id=env.session_id, node_id=nid, timestamp=now(),
                              path=sr.path, component_name=node.display, component_type=node.name, thoughts=thoughts)
        self.buf.append(ev)  # emit(), inlined (hot path; a NodeStarted is never a MessageDelta)
        if self.waiter is not None:
            self.emit_wake()
        t0 = perf()
        started = self.trace.node_started(nid, node, sr.path) if self.trace is not None else None
        timeout = self._timeout(node.name)
        wd = self.watchdog
        attempt = 0
        while True:
            try:
                if timeout is None:
                    route = await comp.run(ctx)
                else:
                    wd.arm(ctx, timeout, task)
                    try:
                        route = await comp.run(ctx)
                    finally:
                        if wd.disarm(ctx):
                            raise TimeoutError(f"timed out after {timeout} s")
                err: BaseException | None = None
                break
            except asyncio.CancelledError:
                raise
            except RunPaused:
                route = Pause()
                err = None
                break
            except TimeoutError as exc:
                err, code = exc, "timeout"
            except NodeFailed as exc:  # a child of this container failed
                err, code = exc, exc.code
            except Exception as exc:
                err, code = exc, "component_failed"
            if attempt >= node.max_retries:
                break
            attempt += 1
            log.info("component %s failed (%s), retry %d/%d", nid, err, attempt, node.max_retries)
            await asyncio.sleep(min(node.delay_s, self.settings.max_retry_delay_s))
            ctx.outputs.clear()
            ctx.inputs.clear()

        if err is not None:
            # What is kept of it is its message. Its traceback holds this frame, which holds it, and so may what
            # it was raised during (a timeout's cancel, an Iteration's group): cycles, dropped here.
            err.__traceback__ = err.__context__ = err.__cause__ = None
        if started is not None:
            RunTrace.node_ran(started, attempt)
        taken: Any = None  # None: every normal edge; else the set of ids routed to
        fatal: NodeFailed | None = None
        error: str | None = None
        if err is not None:
            error = err.message if isinstance(err, NodeFailed) else (str(err) or type(err).__name__)
            ctx.outputs["_ERROR"] = error
            if node.on_error == "comment":
                default = node.default_value
                ctx.outputs[node.exception_output] = default
                if default not in (None, ""):
                    ctx.emit_delta(to_text(default))
                    ctx.emit_message_end()
            elif node.on_error == "goto" and node.goto:
                taken = set(node.goto)
            else:
                fatal = err if isinstance(err, NodeFailed) else NodeFailed(nid, error, code)
        elif route is not None and route.__class__ is Route:
            taken = set(route.next)
        elif route is not None and route.__class__ is Pause:
            # Waits for the user: no NodeFinished, no successor released; the run ends once nothing
            # else can proceed, and a later run resumes here (checkpoint.Replay.resume_inputs).
            sr.paused = True
            self.paused.append(nid)
            return []

        if ctx._pending and fatal is None:
            # Streamed outputs: release downstream now, report the node when its streams end.
            self._track(sr, self.loop.create_task(self._finish_later(sr, node, ctx, t0, error, taken)))
        else:
            self._finished(sr, node, ctx, t0, error, taken)
        if fatal is not None:
            raise fatal
        if sr.top:
            self.state.path.append(nid)
        return self._release(sr, node, taken)

    async def _finish_later(self, sr: _ScopeRun, node: NodePlan, ctx: NodeContext, t0: float,
                            error: str | None, taken: set[str] | None) -> None:
        try:
            await ctx.finish_streams()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = str(exc) or type(exc).__name__
            ctx.outputs["_ERROR"] = error
            sr.fail(NodeFailed(node.id, error))
        self._finished(sr, node, ctx, t0, error, taken)

    def _finished(self, sr: _ScopeRun, node: NodePlan, ctx: NodeContext, t0: float, error: str | None,
                  taken: set[str] | None = None) -> None:
        elapsed = perf() - t0
        if self.trace is not None:
            self.trace.node_finished(node.id, sr.path, error, elapsed)
        outputs = to_jsonable(ctx.outputs)
        outputs["_created_time"] = t0
        outputs["_elapsed_time"] = elapsed
        if sr.top:
            self.last_outputs = ctx.outputs
        env = self.env
        self.emit(NodeFinished.make(run_id=env.run_id, session_id=env.session_id, node_id=node.id,
                                    timestamp=now(), path=sr.path, component_name=node.display,
                                    component_type=node.name, inputs=to_jsonable(ctx.inputs) if ctx.inputs else {},
                                    outputs=outputs, error=error, elapsed_s=elapsed, skipped=False))
        if self.checkpoints:
            self._record(sr, node, ctx, outputs, taken)

    def _record(self, sr: _ScopeRun, node: NodePlan, ctx: NodeContext, outputs: dict[str, Any],
                taken: set[str] | None) -> None:
        refs = None
        retrieval = self.state.retrieval
        if isinstance(retrieval, list) and retrieval and isinstance(retrieval[-1], dict):
            size = len(retrieval[-1].get("chunks") or ())
            if size != self._refs_seen:
                self._refs_seen = size
                refs = to_jsonable(retrieval[-1])
        writes = [(kind, ref, to_jsonable(value)) for kind, ref, value in ctx.writes] if ctx.writes else []
        # In the event stream, right after the NodeFinished: a consumer that stores both keeps them in order.
        self.emit(NodeRecord(node.id, sr.path, outputs, sorted(taken) if taken is not None else None,
                             writes, refs))

    def _restore(self, sr: _ScopeRun, node: NodePlan, ctx: NodeContext, record: NodeRecord) -> list[str]:
        """A component that finished in an earlier attempt: its outputs and writes come back, nothing runs."""
        ctx.outputs.update(record.outputs)
        for kind, ref, value in record.writes:
            if kind == "global":
                ctx.set_global(ref, value)
            else:
                ctx.assign(ref, value)
        if record.retrieval is not None and isinstance(self.state.retrieval, list) and self.state.retrieval:
            self.state.retrieval[-1] = record.retrieval
            self._refs_seen = len(record.retrieval.get("chunks") or ())
        if sr.top:
            self.last_outputs = ctx.outputs
            self.state.path.append(node.id)
        return self._release(sr, node, set(record.route) if record.route is not None else None)

    def _release(self, sr: _ScopeRun, node: NodePlan, taken: set[str] | None) -> list[str]:
        """Resolve node's out-edges; return the successors that are now ready to run."""
        counts = sr.counts
        taken_in = sr.taken
        ready: list[str] = []
        goto_only = node.goto_only
        for t in node.succ:
            if (t not in goto_only) if taken is None else (t in taken):
                taken_in.add(t)
            c = counts[t] - 1
            counts[t] = c
            if c == 0:
                if t in taken_in:
                    ready.append(t)
                else:
                    self._prune(sr, t, ready)
        return ready

    def _prune(self, sr: _ScopeRun, first: str, ready: list[str]) -> None:
        stack = [first]
        nodes = sr.body.nodes
        counts = sr.counts
        env = self.env
        while stack:
            nid = stack.pop()
            node = nodes[nid]
            if self.replay is None or not self.replay.take_pruned(sr.path, nid):
                self.emit(NodeFinished.make(run_id=env.run_id, session_id=env.session_id, node_id=nid,
                                            timestamp=now(), path=sr.path, component_name=node.display,
                                            component_type=node.name, inputs={}, outputs={}, error=None,
                                            elapsed_s=0.0, skipped=True))
                if self.checkpoints:
                    self.emit(NodeRecord(nid, sr.path, skipped=True))
            for t in node.succ:
                c = counts[t] - 1
                counts[t] = c
                if c == 0:
                    if t in sr.taken:
                        ready.append(t)
                    else:
                        stack.append(t)
