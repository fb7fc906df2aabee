"""The start-up heap is frozen out of the collector's sight and young collections are rarer, unless turned off."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("import gc; from services.common import heap; before = gc.get_threshold()[0]; "
         "heap.freeze_startup_heap(); print(gc.get_freeze_count() > 0, before, gc.get_threshold()[0])")


def _probe(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRELLIS_GC_TUNING"}
    if env_value is not None:
        env["TRELLIS_GC_TUNING"] = env_value
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))).stdout.split()


def test_the_startup_heap_is_frozen_and_young_collections_are_rarer():
    frozen, before, after = _probe(None)
    assert frozen == "True" and int(after) > int(before)


def test_gc_tuning_off_keeps_cpythons_defaults():
    frozen, before, after = _probe("0")
    assert frozen == "False" and after == before
