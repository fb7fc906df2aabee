"""Runs one program in a fresh sandbox: start, stream its output, enforce the limits, say how it ended."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import AsyncIterator

from services.common.errors import FailedPrecondition
from services.sandbox import outcome
from services.sandbox._process import CONTROL, Exit, SandboxProcess
from services.sandbox.isolation import Isolation, node_args, rlimits
from services.sandbox.limits import Limits
from services.sandbox.models import Event, ExecRequest, Language, Output
from services.sandbox.pool import ExecutionPool
from services.sandbox.runtimes import Runtimes
from services.sandbox.seccomp import program_fd

log = logging.getLogger(__name__)

BACKSTOP_S = 2.0  # past the wall-time limit, the service kills a run whose guest did not stop it
STDERR_TAIL = 8192  # bytes of stderr kept to recognise how a runtime died (e.g. V8's heap message)


class Executor:
    """Owns the pool; `execute()` yields Output events as they come, then exactly one ExecResult."""

    def __init__(
        self, isolation: Isolation, runtimes: Runtimes, pool: ExecutionPool, seccomp_program: bytes | None, max_result_bytes: int
    ) -> None:
        self.isolation = isolation
        self.runtimes = runtimes
        self.pool = pool
        self.seccomp_program = seccomp_program
        self.max_result_bytes = max_result_bytes

    async def execute(self, req: ExecRequest) -> AsyncIterator[Event]:
        if req.language is Language.JAVASCRIPT and self.runtimes.node is None:
            raise FailedPrecondition("sandbox: JavaScript is not available here (no node runtime found)")
        async with self.pool.slot() as slot:
            async for event in self._run(slot, req):
                yield event

    def _stdin(self, req: ExecRequest, control_w: int, uid: int | None) -> bytes:
        body = json.dumps({"code": req.code, "args": req.args}, ensure_ascii=False).encode()
        header: dict[str, object] = {
            "language": req.language.value,
            "ctl_fd": control_w,
            "rlimits": rlimits(req.limits, req.language),
            "uid": uid,
            "wall_s": req.limits.wall_time_ms / 1000,
            "body_len": len(body),
        }
        if req.language is Language.JAVASCRIPT:
            assert self.runtimes.node is not None
            header |= {"node": self.runtimes.node.executable, "node_args": node_args(req.limits), "runner_js": self.runtimes.runner_js}
        head = json.dumps(header).encode()
        return b"%08x" % len(head) + head + body

    async def _run(self, slot: int, req: ExecRequest) -> AsyncIterator[Event]:
        limits = req.limits
        started = time.monotonic()
        # The guest stops the run at the wall-time limit itself (and reports its usage); this later
        # deadline is the backstop for a guest that cannot.
        deadline = started + limits.wall_time_ms / 1000 + BACKSTOP_S
        isolated = self.isolation.isolated
        seccomp_fd = program_fd(self.seccomp_program) if isolated and self.seccomp_program is not None else -1
        info = os.pipe() if isolated else None
        control = os.pipe()
        try:
            launch = self.isolation.launch(slot, limits, seccomp_fd, info[1] if info else -1)
            stdin_data = self._stdin(req, control[1], launch.uid)
        except BaseException:
            for fd in (seccomp_fd, *(info or ()), *control):
                if fd >= 0:
                    os.close(fd)
            raise
        proc: SandboxProcess | None = None
        try:
            # From here on start() owns every fd above, and closes them even when it fails.
            proc = await SandboxProcess.start(
                launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                stdin_data=stdin_data,
                control=control,
                info=info,
                keep_fds=(seccomp_fd,) if seccomp_fd >= 0 else (),
                max_output_bytes=req.limits.max_output_bytes,
            )
            watch = _Watch(limits, self.max_result_bytes)
            async for chunk in watch.pump(proc, deadline):
                yield chunk
            exit_ = await _wait_until(proc, deadline, watch)
            yield outcome.classify(
                limits=limits,
                stopped=watch.stopped,
                record=watch.record(),
                usage=watch.usage(),
                exit_=exit_,
                stderr_tail=bytes(watch.stderr_tail),
                wall_ms=int((time.monotonic() - started) * 1000),
                truncated=watch.truncated,
                isolated=launch.isolated,
            )
        finally:
            if proc is not None:
                proc.kill()  # no-op once reaped; on cancellation it takes the whole sandbox down
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except asyncio.TimeoutError:
                    log.warning("sandbox: run %s still not reaped 10 s after SIGKILL", proc.proc.pid)
                finally:
                    proc.close()  # if the wait was cancelled, reaping finishes in the background
            launch.cleanup()


class _Watch:
    """Reads a run's events and enforces the output and result caps and the deadline."""

    def __init__(self, limits: Limits, max_result_bytes: int) -> None:
        self.limits = limits
        self.max_result_bytes = max_result_bytes
        self.stopped: str | None = None  # "timeout" | "output" | "result": why the service killed the run
        self.truncated = False
        self.output_bytes = 0
        self.control = bytearray()
        self.stderr_tail = bytearray()

    async def pump(self, proc: SandboxProcess, deadline: float) -> AsyncIterator[Output]:
        open_pipes = 3
        while open_pipes:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise asyncio.TimeoutError
                tag, data = await asyncio.wait_for(proc.events.get(), remaining)
            except asyncio.TimeoutError:
                self._stop(proc, "timeout")
                return
            if data is None:
                open_pipes -= 1
            elif tag == CONTROL:
                self.control += data
                if len(self.control) > self.max_result_bytes:
                    self._stop(proc, "result")
                    return
            else:
                room = self.limits.max_output_bytes - self.output_bytes
                if len(data) > room:
                    data, self.truncated = data[:room], True
                if tag == "stderr":
                    self.stderr_tail = (self.stderr_tail + data)[-STDERR_TAIL:]
                if data:
                    self.output_bytes += len(data)
                    yield Output(tag, data)
                if self.truncated:
                    self._stop(proc, "output")
                    return

    def _stop(self, proc: SandboxProcess, why: str) -> None:
        self.stopped = why
        proc.kill()

    def _records(self) -> list[dict]:
        out = []
        for line in bytes(self.control).split(b"\n")[:-1]:  # complete lines only
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def record(self) -> dict | None:
        """The run's result line (written by the guest runner when main returned or failed)."""
        return next((r for r in self._records() if "status" in r), None)

    def usage(self) -> dict | None:
        """The supervisor's line: exit status, CPU time, peak memory, whether it hit the wall-time limit."""
        found = [r["usage"] for r in self._records() if isinstance(r.get("usage"), dict)]
        return found[-1] if found else None


async def _wait_until(proc: SandboxProcess, deadline: float, watch: _Watch) -> Exit:
    """The exit, killing the run if it outlives the deadline (e.g. it closed its pipes and kept running)."""
    remaining = deadline - time.monotonic()
    if watch.stopped is None:
        try:
            return await asyncio.wait_for(proc.wait(), max(remaining, 0.001))
        except asyncio.TimeoutError:
            watch.stopped = "timeout"
            proc.kill()
    return await proc.wait()

