"""What the orchestrator's Redis client buys: its fast path (services/orchestrator/store/_redis_fast/: one shared
auto-pipelined connection, hiredis packing, a pool fast path, no timer per reply) beside redis-py through its
public API (hiredis parser, a BlockingConnectionPool, its own pipelines; the same pool size, timeouts and
retry rule), on the orchestrator's own work, in the same run, rounds alternating.

    .venv/bin/python bench/redis_client_bench.py [--quick]

1. Runs: one orchestrator in this process (services/orchestrator/app.py's build, the servicer called
   directly: no gRPC in between, so the Redis client's share of the CPU is as large as it gets) on a private
   redis-server; a closed loop of 100 concurrent Runs of a 3-node canvas without a model, each creating its
   session (the gateway's OpenAI request): run start, journal writes, turn, end. Runs/s, p99, CPU us per
   run of this process and of Redis.
2. Journals: 100 concurrent run journals of 20 events each through one JournalWriter, flushed (the pipeline
   path alone): journals/s and CPU us per journal.

Each figure is the median of its rounds; `fast_over_redis_py` divides the fast client's by redis-py's (the
whole pipeline's (e) row with each client: docs/speed-policies.md). Writes bench/results/redis_client.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import redis  # noqa: E402
import redis.asyncio  # noqa: E402
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb  # noqa: E402

from services.common import event_loop  # noqa: E402
from services.common.config import ServerConfig  # noqa: E402
from services.orchestrator.api.canvas import CanvasServicer  # noqa: E402
from services.orchestrator.api.sessions import SessionServicer  # noqa: E402
from services.orchestrator.app import build  # noqa: E402
from services.orchestrator.config import OrchestratorConfig  # noqa: E402
from services.orchestrator.engine.settings import EngineSettings  # noqa: E402
from services.orchestrator.store import redis_client  # noqa: E402
from services.orchestrator.store.journal import JournalWriter, RunJournal  # noqa: E402
from services.orchestrator.store.redis_target import RedisTarget  # noqa: E402
from trellis_cli.stack import redis_binary  # noqa: E402

CLIENTS = ("fast", "redis-py")
NO_MODEL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["StringTransform:a"], "upstream": []},
    "StringTransform:a": {"obj": {"component_name": "StringTransform",
                                  "params": {"method": "merge", "script": "You said: {sys.query}"}},
                          "downstream": ["Message:m"], "upstream": ["begin"]},
    "Message:m": {"obj": {"component_name": "Message", "params": {"content": ["{StringTransform:a@result}"]}},
                  "downstream": [], "upstream": ["StringTransform:a"]}}}


FAST_CONNECT = redis_client.connect


def plain_connect(target: RedisTarget | str) -> redis.asyncio.Redis:
    """redis-py through its public API, with the options and retry rule of redis_client.connect (one Redis)."""
    url = target.url if isinstance(target, RedisTarget) else target
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, retry=redis_client.retry(), max_connections=redis_client.MAX_CONNECTIONS,
        timeout=redis_client.POOL_TIMEOUT_S, socket_timeout=redis_client.SOCKET_TIMEOUT_S,
        socket_connect_timeout=redis_client.CONNECT_TIMEOUT_S)
    return redis.asyncio.Redis(connection_pool=pool)


def use(client: str) -> None:
    """Every Redis client made from now on (the orchestrator's, the journal bench's) is `client`."""
    redis_client.connect = FAST_CONNECT if client == "fast" else plain_connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def closed_loop_runs(url: str, redis_proc: psutil.Process, seconds: float, concurrency: int = 100) -> dict:
    orch = build(OrchestratorConfig(server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0),
                                    engine=EngineSettings(), redis_url=url, llm_gateway_addr="127.0.0.1:9",
                                    retrieval_addr="127.0.0.1:9", sandbox_addr="127.0.0.1:9"))
    for hook in orch.on_startup:
        await hook()
    canvas_svc = next(b.servicer for b in orch.bindings if isinstance(b.servicer, CanvasServicer))
    agents = next(b.servicer for b in orch.bindings if isinstance(b.servicer, SessionServicer)).agents
    agent = await agents.create("bench-rc", title=f"rc {time.monotonic_ns()}", dsl_json=json.dumps(NO_MODEL))
    await agents.publish("bench-rc", agent.id)
    req = canvas_pb.RunRequest(tenant_id="bench-rc", query="hi", create_session=True,
                               agent=canvas_pb.AgentTarget(agent_id=agent.id))

    async def one_run() -> None:
        async for _ in canvas_svc.Run(req, None):
            pass

    for _ in range(20):
        await one_run()  # warm: the plan cache, the connections
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await one_run()
            latencies.append(time.perf_counter() - t0)

    me = psutil.Process()
    cpu0, redis0, t0 = me.cpu_times(), redis_proc.cpu_times(), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    cpu1, redis1 = me.cpu_times(), redis_proc.cpu_times()
    for hook in orch.on_shutdown:
        await hook()
    n = len(latencies)
    return {"runs": n, "runs_per_s": round(n / wall, 1), "p50_ms": round(pct(latencies, 50) * 1000, 2),
            "p99_ms": round(pct(latencies, 99) * 1000, 2),
            "cpu_us_per_run": round(1e6 * (sum(cpu1[:2]) - sum(cpu0[:2])) / n, 1),
            "redis_cpu_us_per_run": round(1e6 * (sum(redis1[:2]) - sum(redis0[:2])) / n, 1)}


async def journals(url: str, redis_proc: psutil.Process, rounds: int, concurrency: int = 100, events: int = 20) -> dict:
    client = redis_client.connect(url)
    writer = JournalWriter(client)
    await client.script_load(__import__("services.orchestrator.store.journal", fromlist=["_APPEND"])._APPEND)
    payload = b"x" * 120

    async def one(i: int, r: int) -> None:
        journal = RunJournal(writer, "bench-rc", f"j{r}-{i}-{time.monotonic_ns()}", ttl_s=60)
        for seq in range(1, events + 1):
            journal.event(seq, payload, "n" if seq % 5 else "", record={"n": seq} if seq % 5 == 0 else None)
            await asyncio.sleep(0)  # as a run hands over events between its steps
        await journal.aclose()

    await asyncio.gather(*(one(i, -1) for i in range(concurrency)))  # warm
    me = psutil.Process()
    cpu0, redis0, t0 = me.cpu_times(), redis_proc.cpu_times(), time.perf_counter()
    for r in range(rounds):
        await asyncio.gather(*(one(i, r) for i in range(concurrency)))
    wall = time.perf_counter() - t0
    cpu1, redis1 = me.cpu_times(), redis_proc.cpu_times()
    await client.aclose()
    n = rounds * concurrency
    return {"journals": n, "events_each": events, "journals_per_s": round(n / wall, 1),
            "cpu_us_per_journal": round(1e6 * (sum(cpu1[:2]) - sum(cpu0[:2])) / n, 1),
            "redis_cpu_us_per_journal": round(1e6 * (sum(redis1[:2]) - sum(redis0[:2])) / n, 1)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    rounds = 2 if args.quick else 5
    seconds = 3 if args.quick else 8
    clients = list(CLIENTS)
    seen: dict[str, dict[str, list[dict]]] = {c: {"runs": [], "journals": []} for c in clients}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = subprocess.Popen([redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                                 "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sync = redis.Redis(port=port)
            for _ in range(200):
                try:
                    sync.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.02)
            url = f"redis://127.0.0.1:{port}/0"
            redis_proc = psutil.Process(proc.pid)
            for r in range(rounds):
                for client in (clients if r % 2 == 0 else clients[::-1]):  # each goes first as often
                    use(client)
                    seen[client]["runs"].append(await closed_loop_runs(url, redis_proc, seconds))
                    seen[client]["journals"].append(await journals(url, redis_proc, 5 if args.quick else 20))
                    sync.flushdb()
                    print(client, seen[client]["runs"][-1], seen[client]["journals"][-1], flush=True)
        finally:
            use("fast")
            proc.terminate()
            proc.wait(10)
    summary: dict[str, Any] = {"load_average": os.getloadavg(), "rounds": rounds, "seconds_per_round": seconds}
    for client in clients:
        summary[client] = {part: {key: statistics.median(r[key] for r in results) for key in results[0]}
                           for part, results in seen[client].items()}
    fast, plain = summary["fast"], summary["redis-py"]
    summary["fast_over_redis_py"] = {
        f"{part}_{key}": round(fast[part][key] / plain[part][key], 3)
        for part, key in (("runs", "runs_per_s"), ("runs", "cpu_us_per_run"), ("runs", "redis_cpu_us_per_run"),
                          ("runs", "p99_ms"), ("journals", "journals_per_s"), ("journals", "cpu_us_per_journal"))}
    return {"summary": summary, "rounds": seen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    result = event_loop.run(measure(parser.parse_args()))
    out = ROOT / "bench" / "results" / "redis_client.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
