"""Every place the stack trades something for speed, each as one named policy chosen here (docs/speed-policies.md
says what each buys, measured by `make bench`).

Code that must stay obviously correct (durability, admission) takes a policy object and asks it; it never
decides on its own from the load it sees. Each policy is chosen by one variable, read once at start-up by the
service's config; an unknown name stops start-up with a message naming the known ones.

| policy | variable | presets (default first) |
|---|---|---|
| `JournalPolicy` | TRELLIS_JOURNAL_POLICY | `at_once`, `batched` |
| `StreamPacing` | TRELLIS_LLM_STREAM_PACING | `linger_under_load`, `immediate` |
| `GcPolicy` | TRELLIS_GC_POLICY | `frozen_startup`, `default` |
| `AllocatorPolicy` | TRELLIS_ALLOCATOR | `jemalloc`, `pymalloc` |
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, TypeVar

P = TypeVar("P")


def _chosen(variable: str, presets: Mapping[str, P], default: str, name: str | None) -> P:
    """The preset `name`, else the one `variable` names, else `default`; an unknown name is an error naming the
    known ones."""
    name = name or os.environ.get(variable) or default
    try:
        return presets[name]
    except KeyError:
        raise ValueError(f"{variable}={name!r} is not one of its policies; known: {', '.join(presets)}") from None


# -- the journal (services/orchestrator/store/journal.py) ------------------------------------------------------

@dataclass(frozen=True)
class JournalPolicy:
    """When a run's journal (event stream and checkpoint, store/journal.py) is written.

    `at_once`: every batch as soon as the previous write is done (what queued meanwhile goes together), so a
    crash loses at most the write in flight. `batched`: while at least `busy_runs` runs run on the replica, a
    new run writes nothing for `first_write_delay_s` (a short run then stores its whole journal with its end,
    in one round trip) and the writer writes at most once per `pace_s`; a crash then loses up to that much of
    each run's stream (its unfinished components run again), and a client rejoining sees events that late.
    """

    name: str
    busy_runs: int = 0
    first_write_delay_s: float = 0.0
    pace_s: float = 0.0

    def first_write_delay(self, running: int) -> float:
        """How long a run starting beside `running` others waits before its journal's first write."""
        return self.first_write_delay_s if self.busy_runs and running >= self.busy_runs else 0.0

    def pace(self, running: int) -> float:
        """Seconds between two writes of the replica's journal writer while `running` runs run there."""
        return self.pace_s if self.busy_runs and running >= self.busy_runs else 0.0


JOURNAL_POLICIES = {
    "at_once": JournalPolicy("at_once"),
    "batched": JournalPolicy("batched", busy_runs=16, first_write_delay_s=0.25, pace_s=0.05),
}
DEFAULT_JOURNAL_POLICY = "at_once"


def journal_policy(name: str | None = None) -> JournalPolicy:
    """The named policy (TRELLIS_JOURNAL_POLICY when no name is given)."""
    return _chosen("TRELLIS_JOURNAL_POLICY", JOURNAL_POLICIES, DEFAULT_JOURNAL_POLICY, name)


# -- stream pacing (the llm_gateway's chat streams, services/common/coalesce.py's Linger) ------------------------

@dataclass(frozen=True)
class StreamPacing:
    """How long a chat stream of the llm_gateway waits after sending a message before it sends the next, so
    that what the model sends meanwhile merges into it (services/common/coalesce.py, `Linger`).

    A stream's cost is paid per message, not per token: every message crosses every process of the pipeline.
    `immediate`: a stream never waits; each message goes out as soon as the previous one is written (what
    arrived meanwhile merges anyway). `linger_under_load`: while the process streams at least `busy_streams`
    turns at once, a stream waits `linger_s` after each message, longer in proportion to the streams beyond
    that, up to `longest_s`; the process then sends about `busy_streams / linger_s` messages a second in all,
    however many streams it carries, until each stream is down to one message per `longest_s`. What it costs:
    the cadence a client sees coarsens under that load. A stream's first message and its end never wait.
    """

    name: str
    busy_streams: int = 0  # 0: never waits
    linger_s: float = 0.0
    longest_s: float = 0.0

    def wait_s(self, streams: int) -> float:
        """How long a stream waits after a message before its next one while the process carries `streams`."""
        if not self.busy_streams or self.linger_s <= 0 or streams < self.busy_streams:
            return 0.0
        return min(max(self.longest_s, self.linger_s), self.linger_s * streams / self.busy_streams)


STREAM_PACINGS = {
    "linger_under_load": StreamPacing("linger_under_load", busy_streams=16, linger_s=0.04, longest_s=4.0),
    "immediate": StreamPacing("immediate"),
}
DEFAULT_STREAM_PACING = "linger_under_load"


def stream_pacing(name: str | None = None) -> StreamPacing:
    """The named pacing (TRELLIS_LLM_STREAM_PACING when no name is given)."""
    return _chosen("TRELLIS_LLM_STREAM_PACING", STREAM_PACINGS, DEFAULT_STREAM_PACING, name)


# -- the garbage collector of every long-running process (services/common/heap.py) ------------------------------

@dataclass(frozen=True)
class GcPolicy:
    """How a long-running process's garbage collector is set once it has started (services/common/heap.py).

    `default`: CPython's own settings. `frozen_startup`: what start-up allocated (modules, generated protobuf
    classes, compiled plans, clients) is frozen out of the collector's sight, so a full collection walks the
    live requests' objects only, and young collections run every `young_threshold` allocations instead of
    CPython's 700, so fewer pauses land on whichever request is running. What it costs: each young collection
    walks more, so a threshold set too high makes the rarer pauses long enough to show in a closed loop's p99.
    And a full collection at least every `full_every_s`: CPython counts allocations net of what reference
    counting frees, so with that threshold a process whose objects mostly die young goes tens of minutes
    without one, while the cycles its requests leave once they outlived a young collection (a gRPC call's
    handler, an exception's frames, a closed connection) wait for it, and its peak sets the heap's size.
    """

    name: str
    freeze_startup_heap: bool = False
    young_threshold: int = 0  # 0: CPython's
    full_every_s: float = 0.0  # 0: whenever CPython decides


GC_POLICIES = {
    "frozen_startup": GcPolicy("frozen_startup", freeze_startup_heap=True, young_threshold=20_000, full_every_s=60.0),
    "default": GcPolicy("default"),
}
DEFAULT_GC_POLICY = "frozen_startup"


def gc_policy(name: str | None = None) -> GcPolicy:
    """The named policy (TRELLIS_GC_POLICY when no name is given)."""
    return _chosen("TRELLIS_GC_POLICY", GC_POLICIES, DEFAULT_GC_POLICY, name)


# -- the memory allocator (services/common/allocator.py) --------------------------------------------------------

@dataclass(frozen=True)
class AllocatorPolicy:
    """What allocates a Python process's memory. Chosen before the interpreter starts, by what starts it:
    `trellis up` puts `environment()` in each Python part's environment, and the image sets the same (Dockerfile).

    `pymalloc`: CPython's own. It takes memory in 1 MiB arenas carved into 16 KiB pools and gives an arena back
    only once every pool in it is free, so the pages a peak touched (a take-over's burst of runs) stay resident
    while the bytes in use fall back: a long-lived process's RSS climbs in steps with its peaks, never down.
    `jemalloc` (default): every allocation through malloc (`PYTHONMALLOC=malloc`), malloc preloaded from Debian's
    libjemalloc2, which gives pages that stayed free for `dirty_decay_ms` (10 s) back to the system from a
    background thread, so RSS follows the bytes in use. What it costs: about 1-5% of the engine's CPU per run
    (bench/engine_bench.py, either way in one run); the C library's malloc instead of either cost 21-96%.
    """

    name: str
    preload: str = ""  # the shared library loaded before the C library (LD_PRELOAD); "": pymalloc
    malloc_conf: str = ""

    def environment(self) -> dict[str, str]:
        """The variables a process started with this policy needs."""
        if not self.preload:
            return {}
        return {"LD_PRELOAD": self.preload, "PYTHONMALLOC": "malloc", "MALLOC_CONF": self.malloc_conf}


ALLOCATOR_POLICIES = {
    "jemalloc": AllocatorPolicy("jemalloc", preload="libjemalloc.so.2", malloc_conf="background_thread:true"),
    "pymalloc": AllocatorPolicy("pymalloc"),
}
DEFAULT_ALLOCATOR = "jemalloc"


def allocator_policy(name: str | None = None) -> AllocatorPolicy:
    """The named policy (TRELLIS_ALLOCATOR when no name is given)."""
    return _chosen("TRELLIS_ALLOCATOR", ALLOCATOR_POLICIES, DEFAULT_ALLOCATOR, name)
