"""`make soak`: the stack for an hour (`--minutes N` for less) at about 60% of what it serves, with churn, gated on
slopes and on returns to baseline (chaos/gates.py), not on levels.

    .venv/bin/python -m chaos.soak [--minutes 60] [--seed 1] [--out bench/results/soak.json]

1. Capacity, in the same run: closed loops of more and more clients on the chaos canvas (chaos/workload.py)
   until the runs finished per second stop growing; the best is what this machine serves.
2. The soak: users arrive at random (a Poisson process) at 60% of that rate, each connecting, sending one to
   three turns on a new session and leaving; a tenth of the turns are left mid-stream (their runs are
   cancelled); a replica is killed every ten minutes (trellis up's supervision starts it again).
3. Every `--sample-s` each process's RSS, open files and asyncio tasks, and Redis's memory, are sampled; after
   the warm-up, and then regularly, a quiet window (no new users, the last runs ended) samples the baselines.

The exit status is 0 when every gate passed, 1 when one failed or could not be measured (a soak too short).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from tabulate import tabulate

from chaos import gates
from chaos.load import Load, LoadConfig, RunSeen
from chaos.model_server import ModelServer
from chaos.report import write
from chaos.runner import ROOT, commit, create_agent
from chaos.sampling import ProcessSample, RedisSample, sample_processes, sample_redis
from chaos.stack import ChaosStack
from services.common import event_loop

CAPACITY_STEPS = (4, 8, 16, 24, 32, 48, 64)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m chaos.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="the soak's length, after the capacity steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--replicas", type=int, default=2, help="orchestrator replicas")
    p.add_argument("--load", type=float, default=0.6, help="the fraction of the measured capacity to offer")
    p.add_argument("--kill-every-min", type=float, default=10.0, help="a replica killed this often (0: never)")
    p.add_argument("--quiet-every-min", type=float, default=0.0, help="a quiet window this often (0: a sixth of it)")
    p.add_argument("--warmup-min", type=float, default=0.0, help="not in the slopes (0: a quarter, at most 10)")
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--step-s", type=float, default=20.0, help="each capacity step's measured seconds")
    p.add_argument("--leave", type=float, default=0.1, help="the fraction of turns left mid-stream")
    p.add_argument("--retention-s", type=int, default=300,
                   help="runs and sessions kept this long (TRELLIS_RUN_TTL_S, TRELLIS_SESSION_TTL_S)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    return p


async def capacity(stack: ChaosStack, agent_id: str, seed: int, step_s: float) -> tuple[float, list[dict]]:
    """Runs finished per second at more and more clients, until it stops growing by a tenth: the best."""
    best, rows = 0.0, []
    for clients in CAPACITY_STEPS:
        load = Load(LoadConfig(stack.url, stack.key, agent_id, clients), seed)
        stop = asyncio.Event()
        task = asyncio.create_task(load.run(stop))
        await asyncio.sleep(5.0)  # the step's ramp
        start = time.monotonic()
        await asyncio.sleep(step_s)
        end = time.monotonic()
        stop.set()
        await task
        done = [s for s in load.seen if s.outcome == "finished" and start <= (s.ended_at or 0) <= end]
        rate = len(done) / step_s
        failed = sum(s.outcome != "finished" for s in load.seen)
        rows.append({"clients": clients, "runs_per_s": round(rate, 2), "p99_s": round(gates.p99(
            [s.ended_at - s.started_at for s in done]) or 0, 3), "not_finished": failed})
        print(f"soak: capacity {clients} clients: {rate:.2f} runs/s", file=sys.stderr, flush=True)
        if rate < best * 1.1:
            best = max(best, rate)
            break
        best = rate
    return best, rows


class Soak:
    def __init__(self, stack: ChaosStack, agent_id: str, args: argparse.Namespace, rate: float,
                 empty: RedisSample) -> None:
        self.stack, self.args, self.rate = stack, args, rate
        self.empty = empty  # Redis before the first run
        self.rng = random.Random(args.seed)
        self.load = Load(LoadConfig(stack.url, stack.key, agent_id, 0, leave_probability=args.leave),
                         self.rng.randrange(2**32))
        self.redis = stack.redis_client()
        self.samples: list[ProcessSample] = []
        self.redis_samples: list[RedisSample] = []
        self.quiet: list[tuple[float, float, list[ProcessSample], RedisSample]] = []  # (from, to, samples, redis)
        self.kills: list[dict[str, Any]] = []
        self.gate = asyncio.Event()

    async def run(self) -> None:
        minutes = self.args.minutes
        warmup = 60 * (self.args.warmup_min or min(10.0, minutes / 4))
        quiet_every = 60 * (self.args.quiet_every_min or max(2.0, minutes / 6))
        kill_every = 60 * self.args.kill_every_min
        self.t0 = time.monotonic()
        self.end = self.t0 + 60 * minutes
        self.warm = self.t0 + warmup
        quiet_at = [self.warm + i * quiet_every for i in range(int((self.end - self.warm) // quiet_every) + 1)
                    if self.warm + i * quiet_every < self.end - 30]
        kill_at = [self.t0 + kill_every * (k + 0.5) for k in range(int(minutes * 60 // kill_every))] if kill_every else []
        stop = asyncio.Event()
        self.gate.set()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            background = [asyncio.create_task(self.load.arrivals(self.rate, stop, self.gate)),
                          asyncio.create_task(self._sample(http, stop))]
            events = sorted([(t, "quiet") for t in quiet_at] + [(t, "kill") for t in kill_at])
            for at, what in events:
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                print(f"soak: {what} at {(time.monotonic() - self.t0) / 60:.1f} min", file=sys.stderr, flush=True)
                await (self._quiet_window(http) if what == "quiet" else self._kill())
            await asyncio.sleep(max(0.0, self.end - time.monotonic()))
            stop.set()
            self.gate.set()
            await asyncio.gather(*background)
            await self._quiet_window(http)  # the last one: after the whole soak
        await self.redis.aclose()

    async def _sample(self, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.samples += await sample_processes(self.stack, http)
            self.redis_samples.append(await sample_redis(self.redis, scan=False))
            try:
                await asyncio.wait_for(stop.wait(), self.args.sample_s)
            except asyncio.TimeoutError:
                pass

    async def _quiet_window(self, http: aiohttp.ClientSession) -> None:
        start = time.monotonic()
        self.gate.clear()
        while self.load.users and time.monotonic() - start < 180:
            await asyncio.sleep(0.5)
        await asyncio.sleep(5.0)  # closed connections and finished tasks settle
        samples = await sample_processes(self.stack, http, peers=True)
        redis = await sample_redis(self.redis, scan=True)
        self.quiet.append((start, time.monotonic(), samples, redis))
        self.gate.set()

    async def _kill(self) -> None:
        name = self.rng.choice(self.stack.orchestrators())
        self.stack.signal(name, signal.SIGKILL)
        at = time.monotonic()
        await self.stack.wait_serving(name)
        self.kills.append({"part": name, "at_min": round((at - self.t0) / 60, 2), "at": at,
                           "back_after_s": round(time.monotonic() - at, 1)})

    # ---- the gates ------------------------------------------------------------------------------------------

    def _clean(self, s: RunSeen) -> bool:
        """A finished run no kill and no quiet window met: its time is the stack's, not a fault's."""
        end = s.ended_at or 0
        return (s.outcome == "finished" and not s.left
                and not any(s.started_at <= k["at"] <= end + 1 for k in self.kills)
                and not any(s.started_at <= q_end and q_start <= end for q_start, q_end, _, _ in self.quiet))

    def _runs_kept(self, at: float) -> int | None:
        """The runs Redis still keeps at `at`: those started within one retention before it (None within one
        retention of the soak's start: Redis still keeps runs of the capacity steps, which are not counted)."""
        if at - self.args.retention_s < self.t0:
            return None
        return sum(1 for s in self.load.seen if s.run_id and at - self.args.retention_s <= s.started_at <= at)

    def verdict(self) -> list[gates.Gate]:
        window = max(120.0, 0.15 * (self.end - self.warm))
        times = [(s.started_at, s.ended_at - s.started_at) for s in self.load.seen if self._clean(s)]
        first = [d for t, d in times if self.warm <= t < self.warm + window]
        last = [d for t, d in times if self.end - window <= t < self.end]
        quiet = [q for q in self.quiet if q[0] >= self.warm]
        return [gates.rss_gate(self.samples, self.warm, self.end, warm_up_s=self.warm - self.t0),
                gates.baseline_gate("fds", [q[2] for q in quiet], self.samples),
                gates.baseline_gate("tasks", [q[2] for q in quiet], self.samples),
                gates.redis_gate([q[3] for q in quiet], [self._runs_kept(q[3].t) for q in quiet], self.empty),
                gates.p99_gate(first, last)]


def render(result: dict[str, Any]) -> str:
    lines = [f"soak: {result['minutes']:g} min at {result['offered_runs_per_s']:.2f} runs/s offered "
             f"({result['config']['load']:.0%} of {result['capacity_runs_per_s']:.2f}), {result['runs']} runs, "
             f"kills {len(result['kills'])}, quiet windows {len(result['quiet_windows'])}, runs kept "
             f"{result['config']['retention_s']} s",
             tabulate([[r["clients"], r["runs_per_s"], r["p99_s"], r["not_finished"]] for r in result["capacity"]],
                      headers=["capacity: clients", "runs/s", "p99 s", "not finished"]), ""]
    for gate in result["gates"]:
        verdict = {True: "PASS", False: "FAIL", None: "not measured (too short to tell)"}[gate["passed"]]
        lines.append(f"gate {gate['name']}: {verdict}")
        if gate["rows"]:
            lines.append(tabulate([list(r.values()) for r in gate["rows"]], headers=list(gate["rows"][0].keys())))
        lines.append("")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="trellis-soak-"))
    model = ModelServer()
    model_url = await model.start()
    try:
        async with ChaosStack(workdir, replicas=args.replicas, replicated=False, proxied=False, model_url=model_url,
                              lease_s=10.0, retention_s=args.retention_s) as stack:
            agent_id = await create_agent(stack)
            redis = stack.redis_client()
            empty = await sample_redis(redis, scan=False)
            await redis.aclose()
            best, steps = await capacity(stack, agent_id, args.seed, args.step_s)
            soak = Soak(stack, agent_id, args, args.load * best, empty)
            await soak.run()
    finally:
        await model.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    verdict = soak.verdict()
    outcomes: dict[str, int] = {}
    for s in soak.load.seen:
        outcomes[s.outcome] = outcomes.get(s.outcome, 0) + 1
    return {
        "minutes": args.minutes, "config": {**{k: v for k, v in vars(args).items() if k != "out"}, "commit": commit()},
        "capacity_runs_per_s": round(best, 2), "capacity": steps, "offered_runs_per_s": round(soak.rate, 2),
        "runs": len(soak.load.seen), "outcomes": outcomes,
        "kills": [{k: v for k, v in kill.items() if k != "at"} for kill in soak.kills],
        "quiet_windows": [{"at_min": round((q[0] - soak.t0) / 60, 1), "redis": q[3].as_dict()} for q in soak.quiet],
        "gates": [{"name": g.name, "passed": g.passed, "rows": g.rows} for g in verdict],
        "passed": all(g.passed is True for g in verdict),
        "redis_empty": soak.empty.as_dict(),
        "redis_memory_mib": [[round((r.t - soak.t0) / 60, 1), r.used_memory_mib, r.keys]
                             for r in soak.redis_samples[::6]],
        "rss_mib": _rss_by_minute(soak),
    }


def _rss_by_minute(soak: Soak) -> dict[str, list[list[float]]]:
    """Each process's RSS about once a minute, as [minute of the soak, MiB], by "part pid": the curve behind
    its slope (a warm-up that flattens looks unlike a leak that does not)."""
    out: dict[str, list[list[float]]] = {}
    last: dict[str, float] = {}
    for s in soak.samples:
        name = f"{s.part} {s.pid}"
        if s.t - last.get(name, -1e9) >= 59.0:
            last[name] = s.t
            out.setdefault(name, []).append([round((s.t - soak.t0) / 60, 1), s.rss_mib])
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = event_loop.run(run(args))
    write(result, args.out)
    print(render(result))
    print(f"soak: report written to {args.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
