"""A process started with a soft limit on open files below its hard limit raises it to the hard limit, and what
it then starts inherits it (services/common/open_files.py: `trellis up` and every service do this at start)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

PROBE = """
import resource, subprocess, sys
from services.common.open_files import raise_soft_limit
print(raise_soft_limit().describe())
child = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout.strip())
print(raise_soft_limit().describe())
"""


def test_the_soft_limit_is_raised_to_the_hard_limit_and_inherited():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    raised = hard if hard != resource.RLIM_INFINITY else int(Path("/proc/sys/fs/nr_open").read_text())
    low = min(256, raised - 1)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, preexec_fn=lower,
                         cwd=Path(__file__).resolve().parents[3]).stdout.splitlines()
    assert out == [f"{raised} per process (soft limit raised from {low} to the hard limit)", str(raised),
                   f"{raised} per process (the hard limit)"]
