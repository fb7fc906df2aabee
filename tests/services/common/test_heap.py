"""As its GcPolicy says, a process's start-up heap is frozen out of the collector's sight and young collections
are rarer, or CPython's defaults stay."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
PROBE = ("import gc; from services.common import heap; from services.common.speed_policies import gc_policy; "
         "before = gc.get_threshold()[0]; heap.set_collector(gc_policy()); "
         "print(gc.get_freeze_count() > 0, before, gc.get_threshold()[0])")


def _probe(policy: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRELLIS_GC_POLICY"}
    if policy is not None:
        env["TRELLIS_GC_POLICY"] = policy
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.split()


def test_by_default_the_startup_heap_is_frozen_and_young_collections_are_rarer():
    frozen, before, after = _probe(None)
    assert frozen == "True" and int(after) > int(before)


def test_the_default_policy_keeps_cpythons_settings():
    frozen, before, after = _probe("default")
    assert frozen == "False" and after == before
