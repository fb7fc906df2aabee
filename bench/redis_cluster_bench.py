"""What a Redis Cluster costs a run, beside one Redis: the orchestrator's own work, redis_client_bench.py's closed
loop (one orchestrator in this process, its servicer called directly; 100 concurrent runs of a 3-node canvas
without a model, each creating its session), on

- `single`: one redis-server, the orchestrator's client (its fast path: services/orchestrator/store/_redis_fast/:
  one auto-pipelined connection for every pipeline, fast connections);
- `cluster`: three primaries with a replica each (tests/support/redis_cluster.py), reached as
  TRELLIS_REDIS_URL=redis+cluster://..., redis-py's cluster client (services/orchestrator/store/_redis_cluster.py:
  its pipelines redis-py's, one round trip per node, on _redis_fast's connections).

    .venv/bin/python bench/redis_cluster_bench.py [--quick]

Every Redis has AOF with fsync every second, as `trellis up` runs it (whichever redis-server `trellis up` finds).
Rounds alternate the setups; each figure is
the median of its rounds: runs/s, p50 and p99, CPU us per run of this process and of Redis (every node of the
cluster, replicas included). `cluster_over_single` divides the cluster's by the single Redis's. Writes
bench/results/redis_cluster.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psutil  # noqa: E402

import redis_client_bench as base  # noqa: E402  (bench/redis_client_bench.py: its closed loop and clients)
from services.common import event_loop  # noqa: E402
from tests.support.redis_cluster import RedisClusterServers  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

SETUPS = ("single", "cluster")
EVERYSEC = ("--appendfsync", "everysec")


class Processes:
    """The CPU times of several processes, summed (closed_loop_runs reads one Redis's)."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(pid) for pid in pids]

    def cpu_times(self) -> tuple[float, float]:
        times = [p.cpu_times() for p in self.procs]
        return sum(t.user for t in times), sum(t.system for t in times)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    rounds = 2 if args.quick else 5
    seconds = 3 if args.quick else 8
    seen: dict[str, list[dict]] = {s: [] for s in SETUPS}
    with tempfile.TemporaryDirectory() as tmp:
        single = RedisServer(Path(tmp) / "single", args=EVERYSEC)
        single.workdir.mkdir()
        cluster = RedisClusterServers(Path(tmp) / "cluster", args=EVERYSEC)
        single.start()
        cluster.start()
        try:
            where = {"single": (single.url, Processes([single.proc.pid])),
                     "cluster": (cluster.url, Processes([n.proc.pid for n in cluster.nodes]))}
            for r in range(rounds):
                for setup in (SETUPS if r % 2 == 0 else SETUPS[::-1]):  # each goes first as often
                    url, procs = where[setup]
                    seen[setup].append(await base.closed_loop_runs(url, procs, seconds))
                    print(setup, seen[setup][-1], flush=True)
        finally:
            single.stop()
            cluster.stop()
    summary: dict[str, Any] = {"load_average": os.getloadavg(), "rounds": rounds, "seconds_per_round": seconds,
                               "cluster_nodes": "3 primaries, a replica each"}
    for setup in SETUPS:
        summary[setup] = {key: statistics.median(r[key] for r in seen[setup]) for key in seen[setup][0]}
    summary["cluster_over_single"] = {key: round(summary["cluster"][key] / summary["single"][key], 3)
                                      for key in ("runs_per_s", "p99_ms", "cpu_us_per_run", "redis_cpu_us_per_run")}
    return {"summary": summary, "rounds": seen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    result = event_loop.run(measure(parser.parse_args()))
    out = ROOT / "bench" / "results" / "redis_cluster.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
