"""Loaded by `bench/held_streams_bench.py --heap-probe` (it puts this directory on PYTHONPATH), or by hand under
any stack started from this process, e.g. the soak: `PYTHONPATH=bench/heap_probe BENCH_HEAP_PROBE_DIR=/tmp/hp
BENCH_HEAP_PROBE_FRAMES=0 .venv/bin/python -m chaos.soak ...`, then `touch /tmp/hp/take-<label>`. With
BENCH_HEAP_PROBE_DIR set, every Trellis process (`-m gateway`, `-m services.*`) traces its allocations
(tracemalloc, BENCH_HEAP_PROBE_FRAMES frames each; 0: not traced) and, when the file `<dir>/take-<label>` appears,
writes `<dir>/<pid>-<label>.snap` (a tracemalloc snapshot, when traced), `<dir>/<pid>-<label>.types.json` (live
objects the collector tracks, by type: count and bytes by sys.getsizeof) and `<dir>/<pid>-<label>.pymalloc.txt`
(sys._debugmallocstats: pymalloc's arenas and blocks) and `<dir>/<pid>-<label>.glibc.xml` (glibc's malloc_info:
the C heap's arenas and what is free in them), then `<dir>/<pid>-<label>.done`. The file `<dir>/trim-<label>`
makes each process call glibc's malloc_trim(0) and write its RSS before and after to `<pid>-<label>.trim.json`:
how much of it was memory the C heap held free. With
BENCH_HEAP_PROBE_CYCLES=1 the collector keeps what it frees (gc.DEBUG_SAVEALL), and each take also writes
`<dir>/<pid>-<label>.cycles.json`: what only the cycle collector freed since the previous take, by type (functions
and methods by name) and by the generation whose collection freed it ("2": full collections; "pending": what a
collection at the take found), and `<dir>/<pid>-<label>.chains.txt`: one reference cycle of each kind of object the
full collections freed. Objects freed by reference counting never show there: a type whose count in "2" grows with
the runs served is a per-run cycle that outlived the young collections, the kind that lets memory peak. (The
full collections' garbage is kept until the next take, for its chains: this mode raises the RSS it looks at.) A thread polls
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
    import ctypes
    import gc
    import json
    import sys
    import threading
    import time
    import tracemalloc

    if frames:
        tracemalloc.start(frames)
    cycles = os.environ.get("BENCH_HEAP_PROBE_CYCLES") == "1"
    if cycles:
        gc.set_debug(gc.DEBUG_SAVEALL)
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

    # With BENCH_HEAP_PROBE_CYCLES: what each collection found only in cycles, by the generation it collected
    # (2: a full collection, which is what lets such garbage pile up), and the full collections' objects for `chains`.
    freed: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    full: list = []

    def name(obj) -> str:
        kind = type(obj).__qualname__
        if kind in ("function", "method", "coroutine", "async_generator"):
            return f"{kind} {obj.__qualname__}"
        if kind == "frame":
            return f"frame {obj.f_code.co_qualname}"
        return kind

    taking = [False]  # while a take collects: its garbage is "pending", not a generation's

    def tally(phase: str, info: dict) -> None:
        if phase == "stop" and gc.garbage and not taking[0]:
            found = list(gc.garbage)
            gc.garbage.clear()
            freed[str(info["generation"])].update(name(obj) for obj in found)
            if info["generation"] == 2:
                full.extend(found)

    def chain(start, among: set[int]) -> list | None:
        """A shortest way from `start` back to itself through `among`: the cycle that kept it."""
        paths = collections.deque([(start, [start])])
        seen = {id(start)}
        while paths:
            obj, path = paths.popleft()
            for ref in gc.get_referents(obj):
                if ref is start:
                    return path
                if id(ref) in among and id(ref) not in seen:
                    seen.add(id(ref))
                    paths.append((ref, path + [ref]))
        return None

    def chains(found: list) -> list[str]:
        """One cycle for each kind of object a full collection freed (plain containers only inside others)."""
        among = {id(obj) for obj in found}
        plain = ("dict", "list", "tuple", "set", "frozenset", "cell")
        done: set[str] = set()
        lines = []
        for obj in found:
            kind = name(obj)
            if kind in done or type(obj).__qualname__ in plain:
                continue
            done.add(kind)
            path = chain(obj, among)
            if path:
                done.update(name(o) for o in path)
                lines.append(" -> ".join(name(o) for o in path))
        return lines

    def cyclic_garbage(base: str) -> None:
        taking[0] = True
        try:
            gc.collect()  # what waits for a collection now: "pending"
        finally:
            taking[0] = False
        pending = collections.Counter(name(obj) for obj in gc.garbage)
        gc.garbage.clear()
        report = {gen: dict(counts.most_common()) for gen, counts in sorted(freed.items())}
        report["pending"] = dict(pending.most_common())
        with open(base + ".cycles.json", "w") as f:
            json.dump(report, f, indent=0)
        with open(base + ".chains.txt", "w") as f:
            f.write("\n".join(chains(full)) + "\n")
        freed.clear()
        full.clear()

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

    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]

    def glibc_info(path: str) -> None:
        """glibc's own account of the memory the C heap holds (its arenas, what is free in them), as XML."""
        fp = libc.fopen(path.encode(), b"w")
        if fp:
            libc.malloc_info(0, fp)
            libc.fclose(fp)

    def rss_kib() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def trim(path: str) -> None:
        """How much of the RSS is memory glibc holds free: given back by malloc_trim(0)."""
        before = rss_kib()
        libc.malloc_trim(0)
        with open(path, "w") as f:
            json.dump({"rss_kib_before": before, "rss_kib_after": rss_kib()}, f)

    def poll() -> None:
        while True:
            time.sleep(0.25)
            try:
                names = os.listdir(out_dir)
            except OSError:
                continue
            for label in [n[5:] for n in names if n.startswith("trim-")]:
                if "trim-" + label not in taken:
                    taken.add("trim-" + label)
                    trim(os.path.join(out_dir, f"{pid}-{label}.trim.json"))
            for label in [n[5:] for n in names if n.startswith("take-")]:
                if label in taken:
                    continue
                taken.add(label)
                base = os.path.join(out_dir, f"{pid}-{label}")
                if frames:
                    tracemalloc.take_snapshot().dump(base + ".snap")
                with open(base + ".types.json", "w") as f:
                    json.dump(census(), f)
                mallocstats(base + ".pymalloc.txt")
                glibc_info(base + ".glibc.xml")
                if cycles:
                    cyclic_garbage(base)
                open(base + ".done", "w").close()

    if cycles:
        gc.callbacks.append(tally)
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
