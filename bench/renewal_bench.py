"""What a lease heartbeat costs a replica driving many runs (services/orchestrator/store/runs.py `renew`): the
renewal of N runs in rounds of `RENEW_ROUND` runs beside the same renewal in one round, through the
orchestrator's own Redis client on a private redis-server, rounds alternating. Per way: the CPU of this process
per heartbeat, its wall time, and the longest the event loop went without running a 1 ms ticker meanwhile
(what every other run of the replica waits through).

    .venv/bin/python bench/renewal_bench.py [--runs 10000] [--heartbeats 6]

Part of `make bench` (a few seconds). Writes bench/results/renewal.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import redis_client_bench as rcb  # noqa: E402  (its free port and redis-server binary)

from services.orchestrator.store import redis_client, runs as run_store  # noqa: E402


async def heartbeat(store: run_store.RunStore, runs: list[tuple[str, str, str, int]]) -> dict[str, float]:
    """One renewal of `runs`: CPU and wall ms, and the loop's longest gap between ticks of a 1 ms ticker."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    held = await store.renew(runs)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    done.set()
    await tick
    if not all(held):
        raise SystemExit("renewal bench: a lease was not renewed")
    return {"cpu_ms": 1000 * cpu, "wall_ms": 1000 * wall, "longest_loop_gap_ms": 1000 * max(gaps)}


async def measure(url: str, n: int, heartbeats: int) -> dict[str, Any]:
    client = redis_client.connect(url)
    store = run_store.RunStore(client, owner="bench", lease_s=30)
    runs = []
    for i in range(n):
        run_id = uuid.uuid4().hex
        await store.start("bench", run_id, f"session-{i}", "agent", spec={})
        runs.append(("bench", run_id, f"session-{i}", 1))
    ways = {f"rounds_of_{run_store.RENEW_ROUND}": run_store.RENEW_ROUND, "one_round": n}
    seen: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    for beat in range(heartbeats):
        for way in (list(ways) if beat % 2 == 0 else list(ways)[::-1]):  # each goes first as often
            run_store.RENEW_ROUND = ways[way]
            seen[way].append(await heartbeat(store, runs))
    await client.aclose()
    return {way: {k: round(statistics.median(b[k] for b in beats), 1) for k in beats[0]} for way, beats in seen.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--heartbeats", type=int, default=6, help="renewals of every run, per way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = rcb.free_port()
        proc = subprocess.Popen([rcb.redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                                 "--save", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            result = asyncio.run(measure(f"redis://127.0.0.1:{port}/0", args.runs, args.heartbeats))
        finally:
            proc.terminate()
            proc.wait(10)
    out = {"runs": args.runs, "heartbeats": args.heartbeats, "median_per_heartbeat": result}
    path = ROOT / "bench" / "results" / "renewal.json"
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
