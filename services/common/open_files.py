"""How many files (sockets) a process may hold open: every held stream is a socket in the gateway (its client)
and in the llm_gateway (its model), so the soft limit on open files bounds the streams a process can hold.
Distributions and container runtimes often start processes with a soft limit of 1,024 beneath a hard limit of
hundreds of thousands; any process may raise its own soft limit up to the hard one, and its children inherit it.

`trellis up` raises it for itself and every process it starts (and says so); each service raises its own at
start too, for when no `trellis up` started it (a container: k8s/README.md says what the runtime must allow).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

_NR_OPEN = Path("/proc/sys/fs/nr_open")  # Linux: the most any process may have, whatever its hard limit says


@dataclass(frozen=True)
class OpenFiles:
    before: int  # the soft limit found
    soft: int  # the soft limit now
    hard: int
    error: str = ""  # why it could not be raised, when it could not

    def describe(self) -> str:
        if self.error:
            return f"{self.soft} per process (could not raise it to the hard limit {self.hard}: {self.error})"
        if self.soft != self.before:
            return f"{self.soft} per process (soft limit raised from {self.before} to the hard limit)"
        return f"{self.soft} per process (the hard limit)"


def raise_soft_limit() -> OpenFiles:
    """Raise this process's soft limit on open files to its hard limit (to the kernel's `nr_open` when the hard
    limit is unlimited); processes started afterwards inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft >= target:
        return OpenFiles(soft, soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        return OpenFiles(soft, soft, hard, str(exc))
    return OpenFiles(soft, target, hard)
