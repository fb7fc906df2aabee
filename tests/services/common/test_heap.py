"""As its GcPolicy says, a process's start-up heap is frozen out of the collector's sight, young collections
are rarer and a full one runs at least every minute, or CPython's defaults stay."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

from services.common.heap import FullCollections

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
PROBE = ("import asyncio, gc; from services.common import heap; from services.common.speed_policies import gc_policy; "
         "before = gc.get_threshold()[0]\n"
         "async def main():\n"
         "    heap.set_collector(gc_policy())\n"
         "    print(gc.get_freeze_count() > 0, before, gc.get_threshold()[0], len(gc.callbacks))\n"
         "asyncio.run(main())")


def _probe(policy: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRELLIS_GC_POLICY"}
    if policy is not None:
        env["TRELLIS_GC_POLICY"] = policy
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.split()


def test_by_default_the_startup_heap_is_frozen_and_young_collections_are_rarer():
    frozen, before, after, callbacks = _probe(None)
    assert frozen == "True" and int(after) > int(before) and callbacks == "1"  # FullCollections notes CPython's


def test_the_default_policy_keeps_cpythons_settings():
    frozen, before, after, callbacks = _probe("default")
    assert frozen == "False" and after == before and callbacks == "0"


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_a_full_collection_frees_the_cycles_in_the_oldest_generation_when_none_ran_for_a_while():
    now = [0.0]
    full = FullCollections(60.0, clock=lambda: now[0])
    gc.disable()  # no collection of CPython's own meanwhile
    try:
        node = Node()
        gc.collect(1)
        gc.collect(1)  # survived two young collections: in the oldest generation, where young ones never look
        gone = weakref.ref(node)
        del node
        gc.collect(1)
        assert gone() is not None
        now[0] = 59.0
        full.tick()
        assert gone() is not None and not full.due()
        now[0] = 60.0
        full.tick()
        assert gone() is None and full.last == 60.0
    finally:
        gc.enable()
        gc.callbacks.remove(full._noted)


def test_a_full_collection_of_cpythons_own_puts_the_next_one_off():
    now = [0.0]
    full = FullCollections(60.0, clock=lambda: now[0])
    try:
        now[0] = 50.0
        gc.collect()
        now[0] = 100.0
        assert not full.due() and full.last == 50.0
        now[0] = 110.0
        assert full.due()
    finally:
        gc.callbacks.remove(full._noted)
