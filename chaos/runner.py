"""`make chaos`: the stack under streaming load, each fault in turn (in an order, on victims and at moments drawn
from the seed), then every invariant checked and a report printed and written.

    .venv/bin/python -m chaos [--seed N] [--faults a,b] [--clients N] [--out bench/results/chaos.json]

The exit status is 1 when an invariant was broken (the report names the runs), 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from chaos import report
from chaos.claims import ClaimWatch
from chaos.faults import FAULTS, FaultContext, Struck
from chaos.invariants import check_runs, run_outcomes, settle
from chaos.load import Load, LoadConfig
from chaos.model_server import ModelServer
from chaos.stack import TENANT, ChaosStack
from chaos.workload import canvas
from services.common import event_loop

ROOT = Path(__file__).resolve().parents[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1, help="the order of the faults, their victims and moments")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, from: {', '.join(FAULTS)}")
    p.add_argument("--clients", type=int, default=12, help="streaming clients, each sending turns back to back")
    p.add_argument("--replicas", type=int, default=3, help="orchestrator replicas")
    p.add_argument("--lease-s", type=float, default=5.0, help="TRELLIS_RUN_LEASE_S of the stack")
    p.add_argument("--warmup-s", type=float, default=10.0, help="load before the first fault")
    p.add_argument("--recovery-s", type=float, default=15.0, help="load after each fault before the next")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos.json")
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, Redis files)")
    return p


def choose(names: str, rng: random.Random) -> list[str]:
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in FAULTS]
    if unknown or not chosen:
        raise SystemExit(f"chaos: unknown fault(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(FAULTS)}")
    rng.shuffle(chosen)
    return chosen


async def create_agent(stack: ChaosStack) -> str:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {stack.key}"}) as http:
        async with http.post(f"{stack.url}/api/v1/agents",
                             json={"title": "chaos", "dsl": canvas(), "release": True}) as resp:
            body = await resp.json()
    if body.get("code") != 0:
        raise SystemExit(f"chaos: cannot create the agent: {body}")
    return body["data"]["id"]


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except OSError:
        return ""


async def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    order = choose(args.faults, rng)
    workdir = Path(tempfile.mkdtemp(prefix="trellis-chaos-"))
    model = ModelServer()
    model_url = await model.start()
    struck: list[Struck] = []
    try:
        async with ChaosStack(workdir, replicas=args.replicas, replicated="redis_failover" in order,
                              model_url=model_url, lease_s=args.lease_s) as stack:
            redis = stack.redis_client()
            claims = ClaimWatch(redis, TENANT, args.lease_s)
            ctx = FaultContext(stack, model, claims, rng)
            load = Load(LoadConfig(stack.url, stack.key, await create_agent(stack), args.clients),
                        seed=rng.randrange(2**32))
            stop = asyncio.Event()
            t0 = time.monotonic()
            clients = asyncio.create_task(load.run(stop), name="chaos-clients")
            await asyncio.sleep(args.warmup_s)
            for name in order:
                await asyncio.sleep(rng.uniform(0, 2))
                print(f"chaos: {name} at {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
                struck.append(await FAULTS[name]().strike(ctx))
                await asyncio.sleep(args.recovery_s)
            stop.set()
            await clients
            settled_s = await settle(redis, TENANT, load.seen, timeout_s=60 + 8 * args.lease_s)
            await asyncio.gather(*ctx.watches)
            duration = time.monotonic() - t0
            checks = await check_runs(redis, TENANT, load.seen, model)
            stored = await run_outcomes(redis, TENANT, [s.run_id for s in load.seen if s.run_id])
            restarts = dict(stack.restarts)
            await redis.aclose()
    finally:
        await model.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    config = {"faults": order, "clients": args.clients, "replicas": args.replicas, "lease_s": args.lease_s,
              "warmup_s": args.warmup_s, "recovery_s": args.recovery_s, "commit": commit()}
    return report.build(seed=args.seed, config=config, duration_s=duration, struck=struck, seen=load.seen,
                        stored=stored, checks=[*checks.values(), claims.check], claim_seconds=claims.seconds, t0=t0,
                        extra={"settled_after_s": round(settled_s, 1), "model_requests": model.total,
                               "restarts": restarts, "workdir": str(workdir) if args.keep else None})


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = event_loop.run(run(args))
    report.write(result, args.out)
    print(report.render(result))
    print(f"chaos: report written to {args.out}")
    return 1 if result["violations"] else 0
