"""`make bench` (h), many held streams: 10,000 concurrent SSE streams of a slow model (one token every 500 ms)
through one gateway process, beside the same streams from the model server directly.

    .venv/bin/python bench/held_streams_bench.py [--streams 10000] [--quick] [--no-floors]

For each target the same schedule of streams is opened by several client processes (one Python process cannot
read 10,000 streams of its own on time): the first-token p50/p99 of every stream, their errors and whether
every token arrived. The stack is started as `trellis up` starts it (bench/pipeline_bench.py's `Stack`), and
the RSS of each of its processes (gateway, orchestrator, llm_gateway, Redis, ...) is read idle and again while
every stream is held: their difference divided by the streams held is the memory a held stream costs each
process. The same is read for the floors, each process doing nothing but relay, in the pipeline's own shape
(bench/stream_floors.py): the model server itself (a bare aiohttp server holding the streams), and the bare
pipeline with each hop's chats on one long-lived stream as Trellis's turns are (aiohttp -> grpc.aio mux ->
grpc.aio mux -> the model server). Writes bench/results/held_streams.json.

Each client counts tokens as occurrences of `qz` (bench/model_server.py), so any framing counts the same.

`--heap-probe` (not part of `make bench`): the stack's processes trace their allocations (bench/heap_probe/), and
the snapshots taken idle and while every stream is held say where each process's bytes per held stream go,
by allocating line and traceback, and by object type; written to bench/results/held_streams_probe.json (the
RSS figures of such a run include tracemalloc's own cost).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
import pipeline_bench as pb  # noqa: E402  (bench/, on sys.path as the script's directory)

PY = sys.executable
clock = time.monotonic  # CLOCK_MONOTONIC: the same clock in every process of the machine


def raise_open_files() -> int:
    """The soft limit on open files up to the hard one, for this process and the ones it starts; the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ---- a client process: its share of the streams -----------------------------------------------------------

async def client_main(args: argparse.Namespace) -> None:
    """Opens stream i of `args.count` at `start_at + (i * clients + index) * gap`, reads each to its end, says
    `held` on stdout once every stream has its first token (or failed), then writes its timings to `out`."""
    import aiohttp

    body = json.loads(args.body).copy()
    headers = {**json.loads(args.headers), "Content-Type": "application/json"}
    payload = json.dumps(body).encode()
    opened: list[float] = [0.0] * args.count
    first: list[float] = [0.0] * args.count
    ended: list[float] = [0.0] * args.count
    tokens = [0] * args.count
    errors: collections.Counter = collections.Counter()
    waiting = [args.count]

    def got_first(i: int, at: float) -> None:
        first[i] = at
        waiting[0] -= 1
        if waiting[0] == 0:
            print("held", flush=True)

    async def stream(session: aiohttp.ClientSession, i: int) -> None:
        at = args.start_at + (i * args.clients + args.index) * args.gap
        await asyncio.sleep(max(0.0, at - clock()))
        opened[i] = clock()
        count = 0
        tail = b""
        try:
            async with session.post(args.url, data=payload, headers=headers) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
                async for chunk in resp.content.iter_any():
                    data = tail + chunk
                    found = data.count(b"qz") - tail.count(b"qz")
                    if found:
                        if count == 0:
                            got_first(i, clock())
                        count += found
                    tail = data[-4:]
            if count != args.tokens:
                raise RuntimeError(f"{count} of {args.tokens} tokens")
        except Exception as exc:  # noqa: BLE001 (counted and reported)
            errors[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1
            if count == 0:
                got_first(i, 0.0)
        ended[i] = clock()
        tokens[i] = count

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=1800)) as session:
        await asyncio.gather(*(stream(session, i) for i in range(args.count)))
    Path(args.out).write_text(json.dumps({"opened": opened, "first": first, "ended": ended, "tokens": tokens,
                                          "errors": dict(errors)}))
    print("done", flush=True)


# ---- the parent: targets, phases, memory ------------------------------------------------------------------

def rss(procs: dict[str, psutil.Process]) -> dict[str, int]:
    out = {}
    for name, proc in procs.items():
        try:
            out[name] = proc.memory_info().rss
        except psutil.NoSuchProcess:
            out[name] = 0
    return out


async def open_streams(url: str, headers: dict[str, str], body: dict[str, Any], streams: int, clients: int,
                       ramp_s: float, tokens: int, watched: dict[str, psutil.Process], tmp: Path,
                       probe: Callable[[str], Awaitable[None]] | None = None,
                       cpu_of: dict[str, psutil.Process] | None = None, profile_s: float = 0) -> dict[str, Any]:
    """`streams` streams from `clients` processes, opened evenly over `ramp_s` (0: all at once); the RSS of
    `watched` idle, once every stream had its first token (all held), and after the streams ended. `probe(label)`
    is awaited after each of the first two readings ("idle", "held"). CPU seconds of `watched` and `cpu_of` (the
    model servers) from the first stream's start to the last one's end."""
    cpu_procs = {**watched, **(cpu_of or {})}
    idle = rss(watched)
    if probe is not None:
        await probe("idle")
    start_at = clock() + 3.0  # every client is up and connected to nothing yet
    cpu_before = pb.cpu_seconds(cpu_procs)
    gap = ramp_s / streams
    procs = []
    outs = []
    for index in range(clients):
        count = len(range(index, streams, clients))
        out = tmp / f"client-{index}-{time.monotonic_ns()}.json"
        outs.append(out)
        procs.append(await asyncio.create_subprocess_exec(
            PY, str(Path(__file__)), "client", "--url", url, "--headers", json.dumps(headers), "--body", json.dumps(body),
            "--count", str(count), "--clients", str(clients), "--index", str(index), "--start-at", repr(start_at),
            "--gap", repr(gap), "--tokens", str(tokens), "--out", str(out), stdout=asyncio.subprocess.PIPE))
    held_at = [0.0]

    async def until(proc: asyncio.subprocess.Process, word: bytes) -> None:
        while (line := await proc.stdout.readline()) and line.strip() != word:
            pass

    await asyncio.gather(*(until(p, b"held") for p in procs))
    held_at[0] = clock()
    await asyncio.sleep(0.5)
    held = rss(watched)
    sampled_at = clock()
    if probe is not None:
        await probe("held")
    profiles = None
    if profile_s:  # py-spy of each Python process of `watched` while the streams are held
        pythons = {k: v for k, v in watched.items() if k not in ("redis", "retrieval", "sandbox")}
        profiles = await asyncio.to_thread(pb.profile, pythons, profile_s, tmp)
    await asyncio.gather(*(until(p, b"done") for p in procs))
    cpu_after = pb.cpu_seconds(cpu_procs)
    for p in procs:
        await p.wait()
    await asyncio.sleep(2.0)
    after = rss(watched)
    firsts, ends, counts, errors, held_now = [], [], [], collections.Counter(), 0
    for out in outs:
        data = json.loads(out.read_text())
        out.unlink()
        errors.update(data["errors"])
        for opened, first, ended, count in zip(data["opened"], data["first"], data["ended"], data["tokens"]):
            if first:
                firsts.append((first - opened) * 1000)
                held_now += first <= sampled_at < ended
            ends.append(ended - opened)
            counts.append(count)
    return {"streams": streams, "clients": clients, "ramp_s": ramp_s, "tokens_per_stream": tokens,
            "errors": dict(errors), "error_count": sum(errors.values()),
            "streams_with_every_token": sum(c == tokens for c in counts),
            "first_token_p50_ms": round(pb.pct(firsts, 50), 1), "first_token_p99_ms": round(pb.pct(firsts, 99), 1),
            "first_token_max_ms": round(max(firsts, default=float("nan")), 1),
            "stream_p50_s": round(pb.pct(ends, 50), 2), "stream_p99_s": round(pb.pct(ends, 99), 2),
            **({"profiles": profiles} if profiles else {}),
            "streams_held_at_sample": held_now, "wall_s": round(clock() - start_at, 1),
            "cpu_s": {name: round(cpu_after[name] - cpu_before[name], 1) for name in cpu_after},
            "rss_mib": {"idle": _mib(idle), "held": _mib(held), "after": _mib(after)},
            "kib_per_held_stream": {name: round((held[name] - idle[name]) / 1024 / max(held_now, 1), 1) for name in held},
            "kib_per_held_stream_total": round(sum(held[n] - idle[n] for n in held) / 1024 / max(held_now, 1), 1)}


def _mib(values: dict[str, int]) -> dict[str, float]:
    return {name: round(v / 2**20, 1) for name, v in values.items()}


async def warm(url: str, headers: dict[str, str], body: dict[str, Any], n: int) -> None:
    """`n` short streams at once: connections, pools and caches on the way are made before the idle reading."""
    async with pb.client_session(n + 10) as s:
        async def one() -> None:
            async with s.post(url, json=body, headers=headers) as resp:
                await resp.read()

        await asyncio.gather(*(one() for _ in range(n)))


class HeapProbe:
    """The stack's processes' allocations (bench/heap_probe/sitecustomize.py), idle and while the streams are held."""

    def __init__(self, out_dir: Path, frames: int) -> None:
        self.dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        os.environ["BENCH_HEAP_PROBE_DIR"] = str(out_dir)  # inherited by the stack's processes
        os.environ["BENCH_HEAP_PROBE_FRAMES"] = str(frames)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "heap_probe"), os.environ.get("PYTHONPATH")]))
        self.pids: dict[int, str] = {}

    def watch(self, procs: dict[str, psutil.Process]) -> None:
        self.pids = {p.pid: name for name, p in procs.items() if name != "redis"}

    async def __call__(self, label: str) -> None:
        (self.dir / f"take-{label}").touch()
        deadline = clock() + 600
        while not all((self.dir / f"{pid}-{label}.done").exists() for pid in self.pids):
            if clock() > deadline:
                raise SystemExit(f"held streams bench: no heap snapshot {label!r} from {sorted(self.pids.values())}")
            await asyncio.sleep(0.5)

    def report(self, held: int, top: int = 25) -> dict[str, Any]:
        """Per process: what grew from idle to held, per held stream, by line, by traceback and by type."""
        out: dict[str, Any] = {}
        for pid, name in self.pids.items():
            idle = tracemalloc.Snapshot.load(str(self.dir / f"{pid}-idle.snap"))
            loaded = tracemalloc.Snapshot.load(str(self.dir / f"{pid}-held.snap"))

            def grown(key: str) -> list[dict[str, Any]]:
                stats = sorted(loaded.compare_to(idle, key), key=lambda s: -s.size_diff)[:top]
                return [{"bytes_per_stream": round(s.size_diff / held), "blocks_per_stream": round(s.count_diff / held, 2),
                         "where": [f"{f.filename.rsplit('site-packages/', 1)[-1].replace(str(ROOT) + '/', '')}:{f.lineno}"
                                   for f in reversed(s.traceback)]} for s in stats]  # the allocation first

            types_idle = json.loads((self.dir / f"{pid}-idle.types.json").read_text())
            types_held = json.loads((self.dir / f"{pid}-held.types.json").read_text())
            by_type = sorted(((t, c - types_idle.get(t, [0, 0])[0], b - types_idle.get(t, [0, 0])[1])
                              for t, (c, b) in types_held.items()), key=lambda x: -x[2])[:top]
            traced = sum(s.size_diff for s in loaded.compare_to(idle, "filename"))
            out[name] = {"traced_bytes_per_stream": round(traced / held),
                         "by_line": grown("lineno"), "by_traceback": grown("traceback"),
                         "by_type": [{"type": t, "objects_per_stream": round(c / held, 2), "bytes_per_stream": round(b / held)}
                                     for t, c, b in by_type]}
        return out


def gc_pauses(gc_dir: Path, names: dict[int, str]) -> dict[str, Any]:
    """Per process: the collector's pauses of 5 ms or more during the run, by generation (count, total, longest;
    wall time and the collecting thread's CPU time)."""
    out: dict[str, Any] = {}
    for path in gc_dir.glob("*-gc.txt"):
        name = names.get(int(path.name.split("-")[0]), path.name)
        by_gen: dict[str, list[tuple[float, float]]] = {}
        for line in path.read_text().splitlines():
            if line.startswith("#"):  # what a young collection after a slow one walked
                continue
            _, gen, ms, _, cpu_ms = line.split()
            by_gen.setdefault(gen, []).append((float(ms), float(cpu_ms)))
        out[name] = {f"gen{gen}": {"count": len(ms), "total_ms": round(sum(m for m, _ in ms)),
                                   "total_cpu_ms": round(sum(c for _, c in ms)), "longest_ms": max(m for m, _ in ms),
                                   "longest_cpu_ms": max(c for _, c in ms)}
                     for gen, ms in sorted(by_gen.items())}
    return out


def start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([PY, *argv], cwd=ROOT)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    limit = raise_open_files()
    streams = args.streams
    tokens = args.tokens
    shape = f"bench-{tokens}-{args.pace_ms}"
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                                           "open_files_limit": limit, "load_average_at_start": os.getloadavg()},
                               "workload": {"streams": streams, "model": shape, "ramp_s": args.ramp_s,
                                            "clients": args.clients, "model_servers": args.model_servers}}
    tmp = Path(tempfile.mkdtemp(prefix="trellis-held-"))
    probe = HeapProbe(tmp / "heap", args.heap_probe) if args.heap_probe else None
    gc_dir = tmp / "gc"
    if args.gc_log:  # the stack's processes log their collector's pauses (bench/heap_probe/sitecustomize.py)
        gc_dir.mkdir()
        os.environ["BENCH_GC_LOG_DIR"] = str(gc_dir)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "heap_probe"), os.environ.get("PYTHONPATH")]))
    model_port = pb.free_port()
    model_url = f"http://127.0.0.1:{model_port}"
    models = [start([str(HERE / "model_server.py"), "--port", str(model_port), "--reuse-port", "--uvloop"])
              for _ in range(args.model_servers)]
    helpers: list[subprocess.Popen] = list(models)
    body = {"model": shape, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    short = {**body, "model": "bench-5-0"}
    try:
        pb.wait_port(model_port)
        model_procs = {f"model_server-{i}" if i else "model_server": psutil.Process(p.pid) for i, p in enumerate(models)}

        if not args.no_direct:
            print(f"(h) direct: {streams} streams of {shape}", flush=True)
            await warm(model_url + "/v1/chat/completions", {}, short, 50)
            results["direct"] = await open_streams(model_url + "/v1/chat/completions", {}, body, streams,
                                                   args.clients, args.ramp_s, tokens, model_procs, tmp)

        if args.code_root:  # the stack from another checkout (a before/after pair): its code is imported first
            pb.ROOT = Path(args.code_root).resolve()
            os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # and nothing is written into it
            results["workload"]["code_root"] = str(pb.ROOT)
        stack = pb.Stack(model_url, tmp / "data")
        for setting in args.stack_env:  # e.g. TRELLIS_LLM_STREAM_PACING=immediate, to compare presets
            name, _, value = setting.partition("=")
            stack.env[name] = value
        results["workload"]["stack_env"] = args.stack_env
        try:
            stack.start()
            agent = await pb.create_agent(stack.url, pb.streaming_canvas(shape))
            warm_agent = await pb.create_agent(stack.url, pb.streaming_canvas("bench-5-0"))
            piped_url = stack.url + "/v1/chat/completions"
            await warm(piped_url, pb.AUTH, {**short, "model": warm_agent}, 50)
            await asyncio.sleep(2.0)
            watched = {k: v for k, v in stack.children().items()}
            if probe is not None:
                probe.watch(watched)
            print(f"(h) pipeline: {streams} streams through {', '.join(sorted(watched))}", flush=True)
            results["pipeline"] = await open_streams(piped_url, pb.AUTH, {**body, "model": agent}, streams,
                                                     args.clients, args.ramp_s, tokens, watched, tmp, probe,
                                                     cpu_of=model_procs, profile_s=args.profile_s)
            if probe is not None:
                results["heap"] = probe.report(results["pipeline"]["streams_held_at_sample"] or 1)
            if args.gc_log:
                results["gc_pauses"] = gc_pauses(gc_dir, {p.pid: name for name, p in watched.items()})
        finally:
            stack.stop()

        if not args.no_floors and probe is None:
            print("(h) floor: the bare pipeline, chats multiplexed at both gRPC hops", flush=True)
            ports = [pb.free_port() for _ in range(3)]
            floor = {"llm_relay": start([str(HERE / "stream_floors.py"), "grpc-mux-relay", "--port", str(ports[0]),
                                         "--upstream", model_url]),
                     "orchestrator_relay": start([str(HERE / "stream_floors.py"), "grpc-mux-relay", "--port",
                                                  str(ports[1]), "--upstream", f"mux:127.0.0.1:{ports[0]}"]),
                     "gateway_relay": start([str(HERE / "stream_floors.py"), "http-grpc", "--port", str(ports[2]),
                                             "--upstream", f"mux:127.0.0.1:{ports[1]}"])}
            helpers.extend(floor.values())
            for port in ports:
                pb.wait_port(port)
            floor_url = f"http://127.0.0.1:{ports[2]}/v1/chat/completions"
            await warm(floor_url, {}, short, 50)
            await asyncio.sleep(1.0)
            results["floor_mux_pipeline"] = await open_streams(
                floor_url, {}, body, streams, args.clients, args.ramp_s, tokens,
                {name: psutil.Process(p.pid) for name, p in floor.items()}, tmp)
    finally:
        for proc in helpers:
            proc.terminate()
        for proc in helpers:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    results["machine"]["load_average_at_end"] = os.getloadavg()
    return results


STACK = ("gateway", "orchestrator", "llm_gateway", "redis")


def summarize(r: dict[str, Any]) -> dict[str, Any]:
    p = r["pipeline"]
    d = r.get("direct") or {"error_count": None, "first_token_p99_ms": float("nan"), "first_token_p50_ms": None,
                            "kib_per_held_stream_total": None}
    out = {"streams": r["workload"]["streams"], "model": r["workload"]["model"],
           "pipeline_errors": p["error_count"], "direct_errors": d["error_count"],
           "pipeline_streams_held_at_sample": p["streams_held_at_sample"],
           "pipeline_kib_per_held_stream": p["kib_per_held_stream_total"],
           "pipeline_kib_per_held_stream_by_process": {k: v for k, v in p["kib_per_held_stream"].items()
                                                       if k.startswith(STACK)},
           "first_token_p99_ms": {"pipeline": p["first_token_p99_ms"], "direct": d["first_token_p99_ms"],
                                  "ratio": round(p["first_token_p99_ms"] / max(d["first_token_p99_ms"], 0.001), 2)},
           "first_token_p50_ms": {"pipeline": p["first_token_p50_ms"], "direct": d["first_token_p50_ms"]},
           "floor_aiohttp_server_kib_per_held_stream": d["kib_per_held_stream_total"]}
    if "floor_mux_pipeline" in r:
        f = r["floor_mux_pipeline"]
        out["floor_mux_pipeline_kib_per_held_stream_by_process"] = f["kib_per_held_stream"]
        out["floor_mux_pipeline_kib_per_held_stream"] = f["kib_per_held_stream_total"]
        out["floor_mux_pipeline_first_token_p99_ms"] = {
            "floor": f["first_token_p99_ms"], "ratio_to_direct": round(f["first_token_p99_ms"] / max(d["first_token_p99_ms"], 0.001), 2)}
        out["floor_mux_pipeline_first_token_p50_ms"] = f["first_token_p50_ms"]
        out["floor_mux_pipeline_errors"] = f["error_count"]
        out["floor_mux_pipeline_streams_held_at_sample"] = f["streams_held_at_sample"]
    out["load_average"] = [r["machine"]["load_average_at_start"][0], r["machine"]["load_average_at_end"][0]]
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        parser = argparse.ArgumentParser()
        parser.add_argument("role")
        for name in ("--url", "--headers", "--body", "--out"):
            parser.add_argument(name, required=True)
        for name in ("--count", "--clients", "--index", "--tokens"):
            parser.add_argument(name, type=int, required=True)
        for name in ("--start-at", "--gap"):
            parser.add_argument(name, type=float, required=True)
        args = parser.parse_args()
        raise_open_files()
        from services.common import event_loop

        event_loop.run(client_main(args))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=180, help="tokens per stream (longer than the ramp: all held)")
    parser.add_argument("--pace-ms", type=int, default=500, help="the model's milliseconds between tokens")
    parser.add_argument("--ramp-s", type=float, default=60.0,
                        help="streams are opened evenly over this (0: at once); 10,000 over 60 s is 167 a second")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--model-servers", type=int, default=2,
                        help="model server processes sharing its port (10,000 streams' tokens are a core's work)")
    parser.add_argument("--quick", action="store_true", help="2,000 streams, for a try while developing")
    parser.add_argument("--no-floors", action="store_true", help="skip the bare pipeline's floor")
    parser.add_argument("--no-direct", action="store_true", help="skip the model called directly")
    parser.add_argument("--gc-log", action="store_true", help="report the stack's garbage collector pauses")
    parser.add_argument("--stack-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the stack's processes (a speed policy's preset, ...); repeatable")
    parser.add_argument("--profile-s", type=float, default=0, help="py-spy the stack this long while held")
    parser.add_argument("--code-root", default="", help="start the stack from this checkout (a before/after pair)")
    parser.add_argument("--out", default="", help="results file name under bench/results/ (default by mode)")
    parser.add_argument("--heap-probe", type=int, default=0, metavar="FRAMES",
                        help="trace the stack's allocations with this many frames each (no floors)")
    args = parser.parse_args()
    if args.quick:
        args.streams, args.ramp_s, args.tokens = min(args.streams, 2000), 10.0, 60
    results = asyncio.run(measure(args))
    results["summary"] = summarize(results)
    name = "held_streams_probe" if args.heap_probe else "held_streams_quick" if args.quick else "held_streams"
    out = HERE / "results" / (args.out or f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results["summary"], indent=2))
    print(f"written: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
