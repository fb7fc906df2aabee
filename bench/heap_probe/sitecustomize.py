"""Loaded by `bench/held_streams_bench.py --heap-probe` (it puts this directory on PYTHONPATH), or by hand under
any stack started from this process, e.g. the soak: `PYTHONPATH=bench/heap_probe BENCH_HEAP_PROBE_DIR=/tmp/hp
BENCH_HEAP_PROBE_FRAMES=0 .venv/bin/python -m chaos.soak ...`, then `touch /tmp/hp/take-<label>`. With
BENCH_HEAP_PROBE_DIR set, every Trellis process (`-m gateway`, `-m services.*`) traces its allocations
(tracemalloc, BENCH_HEAP_PROBE_FRAMES frames each; 0: not traced) and, when the file `<dir>/take-<label>` appears,
writes `<dir>/<pid>-<label>.snap` (a tracemalloc snapshot, when traced), `<dir>/<pid>-<label>.types.json` (live
objects the collector tracks, by type: count and bytes by sys.getsizeof) and `<dir>/<pid>-<label>.pymalloc.txt`
(sys._debugmallocstats: pymalloc's arenas and blocks), then `<dir>/<pid>-<label>.done`. A thread polls
for the files, so a process busy or idle on any loop answers within a quarter second. With BENCH_GC_LOG_DIR set
instead (or as well), each collection of the garbage collector that takes 5 ms or more is written to
`<dir>/<pid>-gc.txt` as `<monotonic time> <generation> <ms> <objects collected> <CPU ms of the thread>`: a pause
stops the loop (its wall time includes any wait for a core on a busy machine; the thread's CPU time does not)."""

from __future__ import annotations

import os

_DIR = os.environ.get("BENCH_HEAP_PROBE_DIR")


def _ours() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(a == b"-m" and i + 1 < len(argv) and (argv[i + 1] == b"gateway" or argv[i + 1].startswith(b"services."))
               for i, a in enumerate(argv))


def _install(out_dir: str, frames: int) -> None:
    import collections
    import gc
    import json
    import sys
    import threading
    import time
    import tracemalloc

    if frames:
        tracemalloc.start(frames)
    pid = os.getpid()
    taken: set[str] = set()

    def census() -> dict[str, list[int]]:
        counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for obj in gc.get_objects():
            entry = counts[type(obj).__qualname__]
            entry[0] += 1
            try:
                entry[1] += sys.getsizeof(obj)
            except TypeError:
                pass
        return dict(counts)

    def mallocstats(path: str) -> None:
        """pymalloc's own account (arenas allocated and their high-water mark, bytes in used and free blocks):
        CPython prints it on the C stderr, so fd 2 points at the file meanwhile."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(fd, 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(fd)

    def poll() -> None:
        while True:
            time.sleep(0.25)
            try:
                labels = [n[5:] for n in os.listdir(out_dir) if n.startswith("take-")]
            except OSError:
                continue
            for label in labels:
                if label in taken:
                    continue
                taken.add(label)
                base = os.path.join(out_dir, f"{pid}-{label}")
                if frames:
                    tracemalloc.take_snapshot().dump(base + ".snap")
                with open(base + ".types.json", "w") as f:
                    json.dump(census(), f)
                mallocstats(base + ".pymalloc.txt")
                open(base + ".done", "w").close()

    threading.Thread(target=poll, name="heap-probe", daemon=True).start()


def _log_gc(out_dir: str) -> None:
    import collections
    import gc
    import time

    out = open(os.path.join(out_dir, f"{os.getpid()}-gc.txt"), "a", buffering=1)
    started = [0.0, 0.0]

    slow_young = [0]  # young collections that took 20 ms of CPU or more: the next one says what it walks

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            if info["generation"] == 0 and slow_young[0]:
                slow_young[0] = 0
                young = gc.get_objects(0)
                kinds = collections.Counter(type(o).__qualname__ for o in young).most_common(6)
                sizes = sorted((len(o), type(o).__qualname__) for o in young if isinstance(o, (list, dict, set, tuple)))
                out.write(f"# young {len(young)} {kinds} largest {sizes[-4:]}\n")
            started[:] = time.perf_counter(), time.thread_time()
            return
        took = time.perf_counter() - started[0]
        if took >= 0.005:
            cpu = time.thread_time() - started[1]
            if info["generation"] == 0 and cpu >= 0.02:
                slow_young[0] = 1
            out.write(f"{time.monotonic():.3f} {info['generation']} {took * 1000:.1f} {info['collected']} {cpu * 1000:.1f}\n")

    gc.callbacks.append(callback)


if _DIR and _ours():
    _install(_DIR, int(os.environ.get("BENCH_HEAP_PROBE_FRAMES", "8")))
if os.environ.get("BENCH_GC_LOG_DIR") and _ours():
    _log_gc(os.environ["BENCH_GC_LOG_DIR"])
