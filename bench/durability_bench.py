"""What durability costs: checkpoints in the engine, and whole runs with their journal in Redis.

1. Engine, 100-node chain: µs per node without checkpoints and with them (a NodeRecord per component, as the
   run manager asks for), side by side in one process.
2. 1,000 runs of a 5-node canvas (no model) through a real orchestrator servicer (gRPC on port 0) and a
   private redis-server, 20 at a time: runs/s, p50/p99, the CPU each run costs this process (the orchestrator
   and its gRPC client) and redis-server, and the bytes each run leaves in Redis (event stream + checkpoint)
   read back with MEMORY USAGE.
3. The journal policies side by side (services/common/speed_policies.py): the same runs, 100 at a time, under
   `at_once` and `batched` in alternating rounds; runs/s and p99 of each (the median round), and at_once's
   runs/s as a fraction of batched's (docs/speed-policies.md: at_once stays the default while that is at
   least 0.9).

Writes bench/results/durability.json.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import psutil  # noqa: E402
import redis  # noqa: E402
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb  # noqa: E402
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc  # noqa: E402

from services.common.config import ServerConfig  # noqa: E402
from services.common.testing import start_server  # noqa: E402
from services.orchestrator.app import build  # noqa: E402
from services.orchestrator.config import OrchestratorConfig  # noqa: E402
from services.orchestrator.engine.checkpoint import NodeRecord  # noqa: E402
from services.orchestrator.engine.dsl import load_canvas  # noqa: E402
from services.orchestrator.engine.runner import run  # noqa: E402
from services.orchestrator.engine.settings import EngineSettings, Services  # noqa: E402
from services.orchestrator.engine.state import RunRequest  # noqa: E402
from services.orchestrator.engine.validate import compile_plan  # noqa: E402
from services.orchestrator.store import keys  # noqa: E402
from trellis_cli.stack import redis_binary  # noqa: E402


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


def chain(n: int) -> dict:
    ids = ["begin"] + [f"StringTransform:{i}" for i in range(n - 1)]
    comps = {}
    for i, cid in enumerate(ids):
        down = [ids[i + 1]] if i + 1 < len(ids) else []
        up = [ids[i - 1]] if i else []
        comps[cid] = cpn("Begin" if i == 0 else "StringTransform", down,
                         None if i == 0 else {"method": "merge", "script": "{sys.query}", "delimiters": [","]}, up)
    return {"components": comps}


async def engine_per_node(checkpoints: bool, nodes: int = 100, repeats: int = 200) -> float:
    plan = compile_plan(load_canvas(chain(nodes)))
    services = Services(settings=EngineSettings())
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        async for ev in run(plan, RunRequest(run_id=f"r{i}", query="q"), None, services, checkpoints=checkpoints):
            if ev.__class__ is NodeRecord:
                ev.to_json()  # what the run manager does with each record
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / nodes * 1e6


async def full_runs(url: str, count: int = 1000, concurrency: int = 20, journal_policy: str = "at_once",
                    redis_pid: int | None = None) -> dict:
    orch = build(OrchestratorConfig(
        server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0), engine=EngineSettings(),
        redis_url=url, llm_gateway_addr="127.0.0.1:9", retrieval_addr="127.0.0.1:9", sandbox_addr="127.0.0.1:9",
        journal_policy=journal_policy))
    for hook in orch.on_startup:
        await hook()
    server, port = await start_server(orch.bindings, service="orchestrator")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = canvas_grpc.CanvasServiceStub(channel)
    dsl = json.dumps(chain(5))
    latencies: list[float] = []
    run_ids: list[str] = []
    todo = iter(range(count))

    async def client() -> None:
        for _ in todo:
            t0 = time.perf_counter()
            events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id="bench", dsl_json=dsl, query="a,b"))]
            latencies.append(time.perf_counter() - t0)
            run_ids.append(events[0].run_id)

    me, redis_proc = psutil.Process(), psutil.Process(redis_pid) if redis_pid else None
    cpu0, redis0 = sum(me.cpu_times()[:2]), sum(redis_proc.cpu_times()[:2]) if redis_proc else 0.0
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    cpu_us = 1e6 * (sum(me.cpu_times()[:2]) - cpu0) / count
    redis_cpu_us = 1e6 * (sum(redis_proc.cpu_times()[:2]) - redis0) / count if redis_proc else None
    await channel.close()
    await server.stop(None)
    for hook in orch.on_shutdown:
        await hook()
    r = redis.Redis.from_url(url)
    sample = run_ids[:: max(1, len(run_ids) // 50)]
    sizes = [(r.memory_usage(keys.run_events("bench", rid)) or 0) + (r.memory_usage(keys.run_checkpoint("bench", rid)) or 0)
             for rid in sample]
    latencies.sort()
    return {"runs": count, "concurrency": concurrency, "runs_per_s": round(count / wall, 1),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
            "cpu_us_per_run": round(cpu_us), **({"redis_cpu_us_per_run": round(redis_cpu_us)} if redis_proc else {}),
            "journal_bytes_per_run": int(statistics.median(sizes))}


async def journal_policies(url: str, rounds: int = 3, count: int = 1000, concurrency: int = 100) -> dict:
    """Each journal policy's runs/s and p99 (its median round of `rounds`, the policies alternating)."""
    seen: dict[str, list[dict]] = {"at_once": [], "batched": []}
    for _ in range(rounds):
        for name in seen:
            seen[name].append(await full_runs(url, count, concurrency, journal_policy=name))
    median = {name: sorted(results, key=lambda r: r["runs_per_s"])[len(results) // 2] for name, results in seen.items()}
    return {"journal_policy_concurrency": concurrency,
            **{f"journal_{name}_runs_per_s": r["runs_per_s"] for name, r in median.items()},
            **{f"journal_{name}_p99_ms": r["p99_ms"] for name, r in median.items()},
            "journal_at_once_runs_ratio": round(median["at_once"]["runs_per_s"] / median["batched"]["runs_per_s"], 3)}


async def main() -> None:
    off = await engine_per_node(False)
    on = await engine_per_node(True)
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen([redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                                 "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port)
            for _ in range(200):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.02)
            url = f"redis://127.0.0.1:{port}/0"
            runs = await full_runs(url, redis_pid=proc.pid)
            policies = await journal_policies(url)
        finally:
            proc.terminate()
            proc.wait(10)
    result = {"summary": {"engine_us_per_node_without_checkpoints": round(off, 2),
                          "engine_us_per_node_with_checkpoints": round(on, 2),
                          "checkpoint_cost_ratio": round(on / off, 2), **runs, **policies}}
    out = ROOT / "bench" / "results" / "durability.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"]))


if __name__ == "__main__":
    asyncio.run(main())
