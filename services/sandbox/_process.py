"""A started sandbox process, driven from the event loop: its pipes and its exit.

Pipes are read through asyncio protocols into one queue and exits are awaited on pidfds (no child
watcher thread). Resource usage comes from the guest's supervisor, which is the one that reaps the run:
bwrap's outer process never waits for the sandbox's processes, so its own rusage says nothing.

bwrap's outer process may exit a moment before the sandbox's pid 1 has finished killing what the run
left behind, so with `info` (bwrap's --info-fd) the exit also waits for that pid 1 to be gone: when
`wait()` returns, no process of the run exists any more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

STDOUT, STDERR, CONTROL = "stdout", "stderr", "control"
TEARDOWN_S = 5.0  # how long the sandbox's pid 1 may take to empty its namespace after the run ended


@dataclass(frozen=True)
class Exit:
    status: int  # raw wait status of the process the service started (bwrap, or the guest in dev mode)

    @property
    def code(self) -> int:
        """Exit code, or -N when killed by signal N."""
        if os.WIFSIGNALED(self.status):
            return -os.WTERMSIG(self.status)
        return os.WEXITSTATUS(self.status)


class _OutputBudget:
    """Bytes of stdout + stderr taken in so far. Past the cap (plus one chunk, so the reader can see the cap
    was crossed) the pipes stop being read: a run writing faster than its consumer can never make the
    service buffer more than its output limit."""

    def __init__(self, cap: int) -> None:
        self.cap, self.taken = cap, 0

    def exhausted(self) -> bool:
        return self.taken > self.cap


class _Reader(asyncio.Protocol):
    def __init__(self, tag: str, queue: asyncio.Queue[tuple[str, bytes | None]], budget: _OutputBudget | None = None) -> None:
        self.tag, self.queue, self.budget = tag, queue, budget
        self.transport: asyncio.ReadTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.queue.put_nowait((self.tag, data))
        if self.budget is not None:
            self.budget.taken += len(data)
            if self.budget.exhausted() and self.transport is not None:
                self.transport.pause_reading()  # the executor kills the run when it reaches this chunk

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait((self.tag, None))


class _Collect(asyncio.Protocol):
    """All bytes of a pipe, delivered once it closes."""

    def __init__(self, done: asyncio.Future[bytes]) -> None:
        self.done, self.data = done, bytearray()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(bytes(self.data))


async def _await_fd(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)


class SandboxProcess:
    """Spawn with `await SandboxProcess.start(...)`; then `events` yields (tag, bytes | None=EOF)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.events: asyncio.Queue[tuple[str, bytes | None]] = asyncio.Queue()
        self._transports: list[asyncio.BaseTransport] = []
        self._exit: Exit | None = None
        self._waiter: asyncio.Future[Exit] | None = None
        self._pidfd = os.pidfd_open(proc.pid)
        self._init_pidfd = -1  # the sandbox's pid 1 (bwrap only)

    @classmethod
    async def start(cls, argv: list[str], **kw: Any) -> "SandboxProcess":
        """Start the process (`_start`'s arguments). A caller cancelled meanwhile (its run's client left) does not
        cut the start off midway, where a pipe handed to the loop but not yet to this object would be closed
        twice (once by its transport, once by its file object: a later fd of the same number with it): the start
        completes on its own, then the process is killed and everything it holds released."""
        starting = asyncio.ensure_future(cls._start(argv, **kw))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(_discard)
            raise

    @classmethod
    async def _start(
        cls,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str | None,
        stdin_data: bytes,
        control: tuple[int, int],
        info: tuple[int, int] | None = None,
        keep_fds: tuple[int, ...] = (),
        max_output_bytes: int = 0,
    ) -> "SandboxProcess":
        """Start the process. `control` and `info` are pipes (r, w): w goes to the child, r is read here.

        Takes ownership of every fd passed in (the write ends are closed here once the child has them).
        """
        reads = [control[0]] + ([info[0]] if info else [])
        writes = (control[1], *([info[1]] if info else []), *keep_fds)
        try:
            # A new session: the whole group can be killed at once, and signals aimed at the service's
            # group (Ctrl-C) do not reach the code.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=writes,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            for fd in reads:
                os.close(fd)
            raise
        finally:
            for fd in writes:
                os.close(fd)
        self = cls(proc)
        try:
            loop = asyncio.get_running_loop()
            assert proc.stdin and proc.stdout and proc.stderr
            w_transport, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
            self._transports.append(w_transport)
            w_transport.write(stdin_data)  # buffered by the transport: the code may be larger than a pipe
            w_transport.close()  # closes once flushed, so the code reads EOF after its input
            pipes = ((STDOUT, proc.stdout), (STDERR, proc.stderr), (CONTROL, os.fdopen(control[0], "rb", 0)))
            budget = _OutputBudget(max_output_bytes) if max_output_bytes else None
            for tag, pipe in pipes:
                transport, _ = await loop.connect_read_pipe(
                    lambda tag=tag: _Reader(tag, self.events, budget if tag != CONTROL else None), pipe)
                self._transports.append(transport)
            if info:
                await self._track_init(os.fdopen(info[0], "rb", 0))
        except BaseException:
            self.kill()
            self.close()  # its pidfd and pipes, once it is reaped: nothing else holds them now
            raise
        return self

    async def _track_init(self, pipe) -> None:  # type: ignore[no-untyped-def]
        """Hold a pidfd on the sandbox's pid 1, from bwrap's --info-fd JSON (written right after clone)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        transport, _ = await loop.connect_read_pipe(lambda: _Collect(done), pipe)
        try:
            data = await asyncio.wait_for(done, TEARDOWN_S)
        finally:
            transport.close()
        try:
            child = int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return  # bwrap failed before starting the sandbox: its exit status and stderr will say why
        try:
            self._init_pidfd = os.pidfd_open(child)
        except ProcessLookupError:
            pass  # already over

    def kill(self) -> None:
        """SIGKILL the process group (bwrap and, through --die-with-parent, the whole sandbox)."""
        if self.proc.returncode is not None:  # reaped: the pid may belong to someone else now
            return
        for send in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), lambda: os.kill(self.proc.pid, signal.SIGKILL)):
            try:
                send()
            except ProcessLookupError:
                pass

    async def wait(self) -> Exit:
        """Wait for the exit, reap, and wait for the sandbox to be empty. Safe to call again and to cancel."""
        if self._waiter is None:
            self._waiter = asyncio.ensure_future(self._reap())
        return await asyncio.shield(self._waiter)

    async def _reap(self) -> Exit:
        await _await_fd(self._pidfd)
        _, status = os.waitpid(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits for it again
        if self._init_pidfd >= 0:
            try:
                await asyncio.wait_for(_await_fd(self._init_pidfd), TEARDOWN_S)
            except asyncio.TimeoutError:
                log.warning("sandbox: pid 1 of run %s still alive %.0fs after the run ended", self.proc.pid, TEARDOWN_S)
        self._exit = Exit(status=status)
        return self._exit

    def close(self) -> None:
        """Release pipes and pidfds; if the process is not reaped yet, that happens first, in the background."""
        if self._waiter is None:
            self._waiter = asyncio.ensure_future(self._reap())
        if not self._waiter.done():
            self._waiter.add_done_callback(lambda _: self._release())
            return
        self._release()

    def _release(self) -> None:
        for t in self._transports:
            t.close()
        self._transports.clear()
        loop = asyncio.get_running_loop()
        for attr in ("_pidfd", "_init_pidfd"):
            fd = getattr(self, attr)
            if fd >= 0:
                loop.remove_reader(fd)
                os.close(fd)
                setattr(self, attr, -1)


def _discard(starting: asyncio.Future) -> None:
    """A start whose caller was cancelled, once it completed: kill the process and release it."""
    if not starting.cancelled() and starting.exception() is None:
        proc = starting.result()
        proc.kill()
        proc.close()
