"""The allocator policy (services/common/allocator.py, `AllocatorPolicy`): a process started with jemalloc's
environment runs on jemalloc, gives the pages a freed peak touched back to the system where pymalloc keeps them,
and keeps the preload to itself (the programs it starts get the system's allocator)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from services.common import allocator
from services.common.speed_policies import allocator_policy
from tests.support.waiting import eventually_sync

JEMALLOC = allocator_policy("jemalloc")

# A peak of short-lived objects interleaved with long-lived ones of other sizes (one in 16: about a pool of them
# in every 1 MiB arena pymalloc takes for the peak, so no arena empties), then the peak is freed. The process
# reports its RSS before the peak, at it and after, then each time it is asked. Measured: pymalloc 10.7, 103.9 and
# 100.8 MiB, the same 20 s later; jemalloc 12.6, 112.0, 112.0 and 16.6 MiB 20 s later.
PEAK = textwrap.dedent("""
    import sys, time
    def rss_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    base = rss_kib()
    kept, peak = [], []
    for i in range(400_000):
        peak.append(bytes(180))
        if i % 16 == 0:
            kept.append((i, i + 1))
    top = rss_kib()
    del peak
    print(base, top, rss_kib(), flush=True)
    for line in sys.stdin:
        print(rss_kib(), flush=True)
""")


def _env(policy_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC", "MALLOC_CONF")}
    return env | policy_env


def test_the_jemalloc_policy_sets_what_a_process_needs_and_pymalloc_nothing():
    assert allocator.installed(JEMALLOC), "libjemalloc2 is missing: scripts/install_system_deps.sh installs it"
    assert JEMALLOC.environment() == {"LD_PRELOAD": "libjemalloc.so.2", "PYTHONMALLOC": "malloc",
                                      "MALLOC_CONF": "background_thread:true"}
    assert allocator_policy("pymalloc").environment() == {}
    with pytest.raises(ValueError, match="TRELLIS_ALLOCATOR='tcmalloc'.*known: jemalloc, pymalloc"):
        allocator_policy("tcmalloc")


def test_a_process_started_with_it_runs_on_jemalloc_and_its_children_do_not():
    code = textwrap.dedent("""
        import json, subprocess, sys
        from services.common import allocator
        before = allocator.keep_to_self()
        child = subprocess.run([sys.executable, "-c", "from services.common import allocator; print(allocator.in_use())"],
                               capture_output=True, text=True, check=True).stdout.strip()
        print(json.dumps([before, child]))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=_env(JEMALLOC.environment()), capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == ["jemalloc", "pymalloc"]
    plain = subprocess.run([sys.executable, "-c", "from services.common import allocator; print(allocator.in_use())"],
                           env=_env({}), capture_output=True, text=True, check=True).stdout.strip()
    assert plain == "pymalloc"
    # asked for malloc, but no preload loaded (the library missing): the C library's, which a service warns of
    bare = subprocess.run([sys.executable, "-c", "from services.common import allocator; print(allocator.in_use())"],
                          env=_env({"PYTHONMALLOC": "malloc"}), capture_output=True, text=True, check=True).stdout.strip()
    assert bare == "malloc"
    # the library preloaded without PYTHONMALLOC=malloc: objects still come from pymalloc
    halfway = subprocess.run([sys.executable, "-c", "from services.common import allocator; print(allocator.in_use())"],
                             env=_env({"LD_PRELOAD": JEMALLOC.preload}), capture_output=True, text=True,
                             check=True).stdout.strip()
    assert halfway == "pymalloc"


def _peak_then_free(policy_env: dict[str, str]) -> tuple[int, int, int, subprocess.Popen]:
    """RSS in KiB before the peak, at the peak and once it is freed, and the process (to ask it again)."""
    proc = subprocess.Popen([sys.executable, "-c", PEAK], env=_env(policy_env), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    base, top, after = (int(x) for x in proc.stdout.readline().split())
    return base, top, after, proc


def _rss_now(proc: subprocess.Popen) -> int:
    proc.stdin.write("\n")
    proc.stdin.flush()
    return int(proc.stdout.readline())


def test_jemalloc_gives_a_freed_peak_back_where_pymalloc_keeps_it():
    """About 90 MiB of objects made and freed: under pymalloc the process stays near its peak, since each arena
    keeps a pool of the long-lived objects; under jemalloc its background thread returns the freed pages once
    they stayed free for the decay time (10 s)."""
    base, top, after, proc = _peak_then_free({})
    try:
        assert top - base > 50_000  # the peak is there to free
        assert after - base > (top - base) * 3 // 4  # pymalloc: most of the peak still resident
    finally:
        proc.kill()
        proc.wait()
    base, top, _, proc = _peak_then_free(JEMALLOC.environment())
    try:
        assert top - base > 50_000
        eventually_sync(lambda: _rss_now(proc) - base < (top - base) // 4, timeout=60,
                        what="jemalloc giving most of the freed peak back")
    finally:
        proc.kill()
        proc.wait()


def test_a_preload_the_policy_did_not_set_is_left_to_the_children():
    foreign = {"LD_PRELOAD": "libfaketime.so.1", "PYTHONMALLOC": "debug", "PATH": "/bin"}
    assert allocator.without_policy(foreign) == foreign
    assert allocator.without_policy(JEMALLOC.environment() | {"PATH": "/bin"}) == {"PATH": "/bin"}
