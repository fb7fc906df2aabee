"""`make bench` (g), a flood: does one busy tenant slow the others, and is its excess answered, not queued?

    .venv/bin/python bench/flood_bench.py [--quick] [--capacities 4,8] [--max-wait-s S] [--flood-clients N]

The stack as bench/pipeline_bench.py starts it (`trellis up` with its embedded defaults), with two API keys of
two tenants and a limits file (`TRELLIS_LIMITS_FILE`) that gives the orchestrator's replica its capacity and
bounded wait (docs/fairness.md) and no limit to either tenant. Each tenant runs the 3-node canvas without a
model over the OpenAI route, in closed loops (a client sends its next request when the last is answered):

1. tenant B alone, 4 clients: p50/p99 and runs/s;
2. the machine's goodput without a flood: tenant A with a tenth of the flood's clients beside B's 4;
3. the flood: tenant A with ten times as many clients (600) beside B's 4.

The three phases alternate in rounds (3, of 10 s each), so a shared machine whose load drifts weighs on each
alike; each ratio is taken within a round and the median over rounds is held against its target. With
`--capacities 4,8,16` the rounds run once per capacity, the limits file rewritten between them (the
orchestrator reads it again without a restart): the trade between B's latency and the machine's goodput.

Every client honours a 429 as the OpenAI SDK does (`retry-after-ms`, else `Retry-After` when within 60 s, else
its exponential backoff) and tries again; a B request's latency counts its retries, as its caller sees it.
Tenant A's clients run in a process of their own (this file, `flood-client`), so B's timings are not taken
on a loop busy with 600 clients. Reported against issue 31's targets: B's p99 under the flood at most 1.5x its
p99 alone, its throughput at least 0.9x; A's refusals answered within 5 ms p99 (timed by A's clients: their
loop's own delay included); no 5xx; total goodput at least 0.95 of phase 2's. Also B's throughput under the
flood over its fair share (what it asks alone, up to half the machine's goodput: the throughput target can
hold only where B alone asks at most half), and the CPU a refusal costs the stack. Writes
bench/results/flood.json (bench/results/flood_quick.json with --quick), with the load average the machine had.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import email.utils
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
import pipeline_bench as pb  # noqa: E402  (bench/, on sys.path as the script's directory)

from services.common.event_loop import new_loop, run as run_loop  # noqa: E402

perf = time.perf_counter
KEYS = {"A": "flood-key-a", "B": "flood-key-b"}
TENANTS = {"A": "flood-tenant-a", "B": "flood-tenant-b"}
B_CLIENTS = 4
RELOAD_S = 3.0  # the orchestrator looks at the limits file about once a second
SETTLE_S = 3.0
QUIET_LOAD = 3.0  # the bench waits (a while) for the 1-minute load average to fall below this
FLOOR_PROBES_PER_S = 20.0  # about what the flood's clients are refused at once their delays have grown


# ---- a client that honours 429 as the OpenAI SDK does ---------------------------------------------------

def sdk_retry_delay(headers: Any, retries: int) -> float:
    """openai-python's `_calculate_retry_timeout`: `retry-after-ms`, else `retry-after` (seconds or an HTTP
    date), used when within (0, 60] s; else 0.5 s doubling per retry up to 8 s, less up to a quarter jitter."""
    delay = None
    try:
        delay = float(headers["retry-after-ms"]) / 1000
    except (KeyError, TypeError, ValueError):
        value = headers.get("retry-after")
        if value is not None:
            try:
                delay = float(value)
            except ValueError:
                parsed = email.utils.parsedate_to_datetime(value) if value else None
                delay = parsed.timestamp() - time.time() if parsed else None
    if delay is not None and 0 < delay <= 60:
        return delay
    return min(0.5 * 2 ** retries, 8.0) * (1 - 0.25 * random.random())


class Tally:
    """What one tenant's clients saw in the measured window: answered runs (latency from the first try to
    the 200, retries included), refusals (time to the 429), 5xx and other failures."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.refusals: list[float] = []
        self.attempts = 0
        self.server_errors = collections.Counter()
        self.failures = collections.Counter()

    def as_dict(self, seconds: float) -> dict[str, Any]:
        return {"runs": len(self.latencies), "runs_per_s": len(self.latencies) / seconds,
                "p50_ms": pb.pct(self.latencies, 50) * 1000, "p99_ms": pb.pct(self.latencies, 99) * 1000,
                "attempts": self.attempts, "attempts_per_s": self.attempts / seconds,
                "refused": len(self.refusals), "refusal_p50_ms": pb.pct(self.refusals, 50) * 1000,
                "refusal_p99_ms": pb.pct(self.refusals, 99) * 1000, "refusal_max_ms":
                    max(self.refusals, default=float("nan")) * 1000,
                "server_errors_5xx": sum(self.server_errors.values()), "server_error_kinds": dict(self.server_errors),
                "failures": dict(self.failures)}


async def closed_loop(url: str, key: str, model: str, clients: int, warm_up_s: float, seconds: float) -> dict[str, Any]:
    """`clients` clients in a closed loop for warm_up_s + seconds; what started in the last `seconds` counts."""
    tally = Tally()
    body = {"model": model, "stream": False, "messages": [{"role": "user", "content": "go"}]}
    headers = {"Authorization": f"Bearer {key}"}
    begin = perf()
    window, stop_at = begin + warm_up_s, begin + warm_up_s + seconds

    async def one_run(s: aiohttp.ClientSession) -> None:
        first = perf()
        retries = 0
        while True:
            start = perf()
            counted = start >= window
            tally.attempts += counted
            try:
                async with s.post(url, json=body, headers=headers) as resp:
                    await resp.read()
                    status, resp_headers = resp.status, resp.headers
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if counted:
                    tally.failures[type(exc).__name__] += 1
                await asyncio.sleep(0.1)
                return
            end = perf()
            if status == 200:
                if first >= window:
                    tally.latencies.append(end - first)
                return
            if status == 429:
                if counted:
                    tally.refusals.append(end - start)
                delay = sdk_retry_delay(resp_headers, retries)
                retries = 0 if retries >= 2 else retries + 1  # the SDK gives up after 2 retries; its caller asks again
                if perf() + delay >= stop_at:
                    await asyncio.sleep(max(0.0, stop_at - perf()))
                    return
                await asyncio.sleep(delay)
                continue
            if counted:
                (tally.server_errors if status >= 500 else tally.failures)[str(status)] += 1
            return

    async def client(s: aiohttp.ClientSession) -> None:
        while perf() < stop_at:
            await one_run(s)

    connector = aiohttp.TCPConnector(limit=clients + 10)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as s:
        await asyncio.gather(*(client(s) for _ in range(clients)))
    return {"clients": clients, "warm_up_s": warm_up_s, "seconds": seconds, **tally.as_dict(seconds)}


async def floor_probe(url: str, per_s: float, warm_up_s: float, seconds: float) -> dict[str, Any]:
    """Requests to the refusal floor (`refusal_floor`) at `per_s` a second, each on its own, for warm_up_s +
    seconds: the time each 429 took, from the loop that also runs the flood's clients."""
    times: list[float] = []
    body = {"model": "floor", "stream": False, "messages": [{"role": "user", "content": "go"}]}
    begin = perf()
    window, stop_at = begin + warm_up_s, begin + warm_up_s + seconds

    async def one(s: aiohttp.ClientSession) -> None:
        start = perf()
        async with s.post(url, json=body, headers={"Authorization": "Bearer floor"}) as resp:
            await resp.read()
            if resp.status != 429:
                raise SystemExit(f"flood bench: the refusal floor answered {resp.status}")
        if start >= window:
            times.append(perf() - start)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        probes = []
        while perf() < stop_at:
            probes.append(asyncio.create_task(one(s)))
            await asyncio.sleep(1 / per_s)
        await asyncio.gather(*probes)
    return {"per_s": per_s, "refused": len(times), "refusal_p50_ms": pb.pct(times, 50) * 1000,
            "refusal_p99_ms": pb.pct(times, 99) * 1000}


def flood_client(args: argparse.Namespace) -> int:
    """The flooding tenant's clients, in their own process: says `started`, runs, prints its tally as JSON
    (with the refusal floor's probe beside them when `--floor-url` names one)."""
    print("started", flush=True)

    async def both() -> dict[str, Any]:
        flood = closed_loop(args.url, args.key, args.model, args.clients, args.warm_up_s, args.seconds)
        if not args.floor_url:
            return await flood
        result, floor = await asyncio.gather(flood, floor_probe(args.floor_url, FLOOR_PROBES_PER_S, args.warm_up_s,
                                                                args.seconds))
        return {**result, "floor": floor}

    print(json.dumps(run_loop(both())), flush=True)
    return 0


def refusal_floor(args: argparse.Namespace) -> int:
    """The least a refusal can take here: a bare aiohttp server answering every chat completion with a 429
    shaped like the gateway's (Retry-After and RateLimit headers, an OpenAI error body; the request's JSON
    read), doing nothing else."""
    from aiohttp import web

    async def refuse(request: web.Request) -> web.Response:
        await request.json()
        return web.json_response(
            {"error": {"message": "tenant over its share: retry later", "type": "rate_limit_exceeded",
                       "param": None, "code": "rate_limit_exceeded"}},
            status=429, headers={"Retry-After": "1", "retry-after-ms": "1000", "RateLimit-Policy": "floor",
                                 "RateLimit": "limit=0, remaining=0, reset=1"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None, loop=new_loop())
    return 0


# ---- the phases -----------------------------------------------------------------------------------------

class Flood:
    """Tenant A's clients in a process of their own, for the same window as the B clients beside them."""

    def __init__(self, url: str, model: str, clients: int, warm_up_s: float, seconds: float, floor_url: str) -> None:
        self.proc = subprocess.Popen(
            [pb.PY, str(Path(__file__).resolve()), "flood-client", "--url", url, "--key", KEYS["A"], "--model", model,
             "--clients", str(clients), "--warm-up-s", str(warm_up_s), "--seconds", str(seconds),
             "--floor-url", floor_url],
            cwd=ROOT, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "started":
            raise SystemExit("flood bench: the flood's clients did not start")

    async def result(self) -> dict[str, Any]:
        out, _ = await asyncio.to_thread(self.proc.communicate, timeout=600)
        if self.proc.returncode != 0:
            raise SystemExit(f"flood bench: the flood's clients failed (exit {self.proc.returncode})")
        return json.loads(out.strip().splitlines()[-1])


def cpu_seconds(stack: pb.Stack, clients: dict[str, psutil.Process]) -> dict[str, float]:
    """CPU seconds of each process so far, and the machine's: `machine_busy` (every process, ours or not) and
    `machine_idle`, in CPU seconds (cores x seconds)."""
    out = stack.cpu_s()
    for name, proc in clients.items():
        times = proc.cpu_times()
        out[name] = times.user + times.system
    machine = psutil.cpu_times()
    out["machine_idle"] = machine.idle + getattr(machine, "iowait", 0.0)
    out["machine_busy"] = sum(machine) - out["machine_idle"]
    return out


async def phase(stack: pb.Stack, agents: dict[str, str], a_clients: int, warm_up_s: float,
                seconds: float, floor_url: str = "") -> dict[str, Any]:
    """B's 4 clients, beside A's `a_clients` (none: B alone), over the same window; and the cores each process
    used in that window (the stack's, B's clients: this process, A's clients). With `floor_url`, A's process
    also times the refusal floor's 429s."""
    url = stack.url + "/v1/chat/completions"
    flood = Flood(url, agents["A"], a_clients, warm_up_s, seconds, floor_url) if a_clients else None
    clients = {"clients_b": psutil.Process(), **({"clients_a": psutil.Process(flood.proc.pid)} if flood else {})}
    await asyncio.sleep(SETTLE_S)  # what the last phase left (runs, refused clients' connections) is gone
    load_at_start = os.getloadavg()
    b_loop = asyncio.create_task(closed_loop(url, KEYS["B"], agents["B"], B_CLIENTS, warm_up_s, seconds))
    await asyncio.sleep(warm_up_s)
    cpu0, t0 = cpu_seconds(stack, clients), perf()
    await asyncio.sleep(seconds - 1)  # ends before the flood's process does
    cpu1, t1 = cpu_seconds(stack, clients), perf()
    b = await b_loop
    a = await flood.result() if flood else None
    goodput = b["runs_per_s"] + (a["runs_per_s"] if a else 0.0)
    return {"b": b, "a": a, "goodput_runs_per_s": goodput, "load_average_at_start": load_at_start,
            "load_average_at_end": os.getloadavg(),
            "cores": {name: round((cpu1[name] - cpu0.get(name, 0.0)) / (t1 - t0), 3) for name in cpu1}}


async def create_agent(url: str, key: str, dsl: dict[str, Any]) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/api/v1/agents", headers={"Authorization": f"Bearer {key}"},
                          json={"title": f"flood {time.monotonic_ns()}", "dsl": dsl, "release": True}) as r:
            body = await r.json()
    if body.get("code") != 0:
        raise SystemExit(f"flood bench: cannot create an agent: {body}")
    return body["data"]["id"]


def wait_for_quiet(limit: float, patience_s: float) -> list[float]:
    """Wait up to `patience_s` for the 1-minute load average to fall below `limit`; the load seen last."""
    deadline = time.monotonic() + patience_s
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        print(f"load average {os.getloadavg()[0]:.2f} >= {limit}: waiting", flush=True)
        time.sleep(15)
    return list(os.getloadavg())


async def queue_floor(capacity: int, max_wait_s: float, waiting: int = 400, n: int = 20000) -> dict[str, Any]:
    """The fair queue's own part, in this process: microseconds for a refusal with `waiting` runs of the
    flooding tenant queued, and for a release that admits the next waiter (two tenants waiting)."""
    from services.orchestrator.limits.fair_queue import FairQueue, QueueFull

    queue = FairQueue(capacity, 3600.0)
    held = [await queue.admit("a") for _ in range(capacity)]
    for slot in held:  # a measured service rate
        slot.release(1.0)
    held = [await queue.admit("a") for _ in range(capacity)]
    waiters = [asyncio.create_task(queue.admit(t)) for t in ["a"] * waiting + ["b"] * 4]
    while queue.waiting < len(waiters):
        await asyncio.sleep(0)
    queue.max_wait_s = 1e-9  # every new run of either tenant is over the bound now
    refusals = []
    for _ in range(n):
        start = perf()
        try:
            queue.admit("a").send(None)
        except QueueFull:
            refusals.append(perf() - start)
    releases = []
    for slot in held:
        start = perf()
        slot.release(1.0)
        releases.append(perf() - start)
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    return {"waiting": waiting + 4, "refusal_p50_us": pb.pct(refusals, 50) * 1e6,
            "refusal_p99_us": pb.pct(refusals, 99) * 1e6, "release_admitting_next_p50_us": pb.pct(releases, 50) * 1e6,
            "refusals_timed": len(refusals)}


def limits_file(path: Path, capacity: int, max_wait_s: float) -> None:
    """The replica's capacity and bounded wait; no limit for either tenant (the fair queue alone is measured)."""
    path.write_text(f"capacity:\n  runs: {capacity}\n  max_wait_s: {max_wait_s}\n")


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    seconds, warm_up_s = (6.0, 3.0) if args.quick else (10.0, 5.0)
    tmp = Path(tempfile.mkdtemp(prefix="trellis-flood-"))
    limits = tmp / "limits.yaml"
    limits_file(limits, args.capacities[0], args.max_wait_s)
    model_port, floor_port = pb.free_port(), pb.free_port()
    model = subprocess.Popen([pb.PY, str(HERE / "model_server.py"), "--port", str(model_port)])
    floor = subprocess.Popen([pb.PY, str(Path(__file__).resolve()), "refusal-floor", "--port", str(floor_port)],
                             cwd=ROOT)
    floor_url = f"http://127.0.0.1:{floor_port}/v1/chat/completions"
    stack = pb.Stack(f"http://127.0.0.1:{model_port}", tmp / "data")
    stack.env["TRELLIS_API_KEYS"] = ",".join(f"{KEYS[t]}:{TENANTS[t]}" for t in ("A", "B"))
    stack.env["TRELLIS_LIMITS_FILE"] = str(limits)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "settings": {"capacities": args.capacities, "rounds": args.rounds, "max_wait_s": args.max_wait_s, "b_clients": B_CLIENTS,
                     "saturating_a_clients": args.flood_clients // 10, "flood_a_clients": args.flood_clients,
                     "warm_up_s": warm_up_s, "seconds": seconds},
        "by_capacity": {}}
    results["queue_floor"] = await queue_floor(args.capacities[0], args.max_wait_s)
    try:
        pb.wait_port(model_port)
        pb.wait_port(floor_port)
        results["machine"]["load_average_before_start"] = wait_for_quiet(QUIET_LOAD, args.patience_s)
        stack.start()
        results["machine"]["processes"] = sorted(stack.children())
        agents = {t: await create_agent(stack.url, KEYS[t], pb.NO_MODEL) for t in ("A", "B")}
        # warm: connections, plans, caches
        await closed_loop(stack.url + "/v1/chat/completions", KEYS["B"], agents["B"], B_CLIENTS, 0.0, 2.0)
        for capacity in args.capacities:
            # The limits file is read again when it changes, without a restart (services/orchestrator/limits/).
            limits_file(limits, capacity, args.max_wait_s)
            await asyncio.sleep(RELOAD_S)
            rounds = []
            for n in range(1, args.rounds + 1):
                print(f"capacity {capacity}, round {n}: 1. tenant B alone", flush=True)
                phases = {"b_alone": await phase(stack, agents, 0, warm_up_s, seconds)}
                print(f"capacity {capacity}, round {n}: 2. the machine's goodput: A with {args.flood_clients // 10}"
                      " clients beside B", flush=True)
                phases["saturated"] = await phase(stack, agents, args.flood_clients // 10, warm_up_s, seconds)
                print(f"capacity {capacity}, round {n}: 3. the flood: A with {args.flood_clients} clients beside B",
                      flush=True)
                phases["flood"] = await phase(stack, agents, args.flood_clients, warm_up_s, seconds, floor_url)
                rounds.append(phases)
            results["by_capacity"][str(capacity)] = {"limits_file": limits.read_text(), "rounds": rounds}
        results["machine"]["rss_mb_after"] = stack.rss_mb()
    finally:
        stack.stop()
        for proc in (model, floor):
            proc.terminate()
            proc.wait(10)
    return results


TARGETS = {"b_p99_ratio": ("<=", 1.5), "b_throughput_ratio": (">=", 0.9), "a_refusal_p99_ms": ("<=", 5.0),
           "server_errors_5xx": ("<=", 0), "goodput_ratio": (">=", 0.95)}


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per capacity: each round's figures, and the median over rounds of each measured ratio against its target
    (the rounds alternate the phases, so a machine whose load drifts weighs on each phase alike)."""
    out: dict[str, Any] = {}
    for capacity, r in results["by_capacity"].items():
        rounds = [summarize_round(phases) for phases in r["rounds"]]
        median = {k: statistics.median(x["measured"][k] for x in rounds) for k in rounds[0]["measured"]}
        out[f"capacity_{capacity}"] = {
            "measured_median": {k: round(v, 3) for k, v in median.items()},
            "targets": {k: f"{op} {v}" for k, (op, v) in TARGETS.items()},
            "met": {k: (median[k] <= v if op == "<=" else median[k] >= v) for k, (op, v) in TARGETS.items()},
            "rounds": rounds}
    out["queue_floor_refusal_p99_us"] = round(results["queue_floor"]["refusal_p99_us"], 1)
    return out


def summarize_round(r: dict[str, Any]) -> dict[str, Any]:
    alone, saturated, flood = r["b_alone"]["b"], r["saturated"], r["flood"]
    b, a = flood["b"], flood["a"]
    fives = sum(p[side]["server_errors_5xx"] for p in (r["b_alone"], saturated, flood)
                for side in ("a", "b") if p[side])
    measured = {
        "b_p99_ratio": b["p99_ms"] / alone["p99_ms"],
        "b_throughput_ratio": b["runs_per_s"] / alone["runs_per_s"],
        "a_refusal_p99_ms": a["refusal_p99_ms"],
        # The same loop's 429s from a server that does nothing else, on the machine as loaded: the least a
        # refusal timed this way can take here (`refusal_floor`).
        "floor_refusal_p99_ms": a["floor"]["refusal_p99_ms"],
        "server_errors_5xx": fives,
        "goodput_ratio": flood["goodput_runs_per_s"] / saturated["goodput_runs_per_s"],
        # Equal weights: B's fair share is what it asks alone, up to half of what the machine serves. Under
        # 1 when the queue gives it less; the throughput target above also needs B alone to ask at most half.
        "b_throughput_over_fair_share": b["runs_per_s"] / min(alone["runs_per_s"], saturated["goodput_runs_per_s"] / 2),
    }
    # What a refusal costs the stack: its cores under the flood less what the runs served cost without it.
    stack_cores = {name: sum(v for k, v in p["cores"].items() if not k.startswith(("clients", "machine")))
                   for name, p in (("saturated", saturated), ("flood", flood))}
    cpu_ms_per_run = 1000 * stack_cores["saturated"] / saturated["goodput_runs_per_s"]
    refusals_per_s = a["refused"] / a["seconds"]
    cpu_ms_per_refusal = ((1000 * stack_cores["flood"] - cpu_ms_per_run * flood["goodput_runs_per_s"]) / refusals_per_s
                          if refusals_per_s else float("nan"))
    return {
        "b_alone": {"p50_ms": round(alone["p50_ms"], 1), "p99_ms": round(alone["p99_ms"], 1),
                    "runs_per_s": round(alone["runs_per_s"], 1)},
        "b_under_flood": {"p50_ms": round(b["p50_ms"], 1), "p99_ms": round(b["p99_ms"], 1),
                          "runs_per_s": round(b["runs_per_s"], 1), "refused": b["refused"]},
        "a_flood": {"clients": a["clients"], "attempts_per_s": round(a["attempts_per_s"], 1),
                    "runs_per_s": round(a["runs_per_s"], 1), "refused": a["refused"],
                    "refusal_p50_ms": round(a["refusal_p50_ms"], 2), "refusal_p99_ms": round(a["refusal_p99_ms"], 2),
                    "attempts_over_served": round(a["attempts_per_s"] / saturated["goodput_runs_per_s"], 2),
                    "floor_refusal_p50_ms": round(a["floor"]["refusal_p50_ms"], 2),
                    "floor_refusal_p99_ms": round(a["floor"]["refusal_p99_ms"], 2)},
        "goodput_runs_per_s": {"saturated_without_flood": round(saturated["goodput_runs_per_s"], 1),
                               "under_flood": round(flood["goodput_runs_per_s"], 1)},
        "measured": {k: round(v, 3) if isinstance(v, float) else v for k, v in measured.items()},
        "cores": {"b_alone": r["b_alone"]["cores"], "saturated": saturated["cores"], "flood": flood["cores"]},
        "stack_cpu_ms": {"per_run_saturated": round(cpu_ms_per_run, 3), "per_refusal_flood": round(cpu_ms_per_refusal, 3)},
        "load_average": [r["b_alone"]["load_average_at_start"][0], flood["load_average_at_end"][0]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    client = sub.add_parser("flood-client", help="(internal) the flooding tenant's clients")
    client.add_argument("--url", required=True)
    client.add_argument("--key", required=True)
    client.add_argument("--model", required=True)
    client.add_argument("--clients", type=int, required=True)
    client.add_argument("--warm-up-s", type=float, required=True)
    client.add_argument("--seconds", type=float, required=True)
    client.add_argument("--floor-url", default="", help="the refusal floor, probed beside the flood")
    floor = sub.add_parser("refusal-floor", help="(internal) a bare server answering every request with a 429")
    floor.add_argument("--port", type=int, required=True)
    parser.add_argument("--quick", action="store_true", help="shorter phases, for a try while developing")
    parser.add_argument("--capacities", type=lambda v: [int(c) for c in v.split(",")], default=[4],
                        help="the replica's runs at once (limits file), one set of phases each: 4,8,16")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the three phases per capacity")
    parser.add_argument("--max-wait-s", type=float, default=0.5, help="the bounded wait (limits file)")
    parser.add_argument("--flood-clients", type=int, default=600, help="tenant A's clients in the flood")
    parser.add_argument("--patience-s", type=float, default=600, help=f"how long to wait for a load below {QUIET_LOAD}")
    args = parser.parse_args()
    if args.mode == "flood-client":
        return flood_client(args)
    if args.mode == "refusal-floor":
        return refusal_floor(args)
    results = asyncio.run(measure(args))
    results["summary"] = summarize(results)
    out = HERE / "results" / ("flood_quick.json" if args.quick else "flood.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results["summary"], indent=2))
    print(f"written: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
