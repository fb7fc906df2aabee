#!/usr/bin/env python3
"""Sandbox service: warm start of a trivial snippet, seen by a gRPC client, against floors from the same run.

The service runs as its own process (`python -m services.sandbox`, already started and warm, as in
production); each measured call is one full Execute: a fresh bwrap sandbox, the interpreter start, main(),
the result on the wire.

  python_warm_start   `def main(): return 1`, sequential calls (target: p50 under 150 ms)
  js_warm_start       `function main() { return 1 }`
  python_parallel     runs/s with as many concurrent calls as the service has workers
Floors: the same interpreters started bare (no sandbox, no service) with `-c pass` / `-e 0`.

Usage: python bench/sandbox_bench.py [--quick]   -> bench/results/sandbox.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb  # noqa: E402
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc  # noqa: E402

from services.sandbox.runtimes import default_node, default_python  # noqa: E402
from trellis_cli.stack import allocator_choice  # noqa: E402

TARGET_MS = 150.0
PY_CODE = "def main():\n    return 1\n"
JS_CODE = "function main() { return 1 }\n"


def _stats(samples_ms: list[float]) -> dict[str, float]:
    s = sorted(samples_ms)
    return {
        "n": len(s),
        "p50_ms": round(statistics.median(s), 2),
        "p95_ms": round(s[min(len(s) - 1, int(len(s) * 0.95))], 2),
        "mean_ms": round(statistics.fmean(s), 2),
        "min_ms": round(s[0], 2),
    }


def _bare(argv: list[str], n: int) -> dict[str, float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        samples.append((time.perf_counter() - t) * 1000)
    return _stats(samples)


async def _execute(stub: sb_grpc.SandboxServiceStub, language: int, code: str) -> float:
    t = time.perf_counter()
    result = None
    async for msg in stub.Execute(sb_pb.ExecuteRequest(language=language, code=code), timeout=60):
        if msg.HasField("result"):
            result = msg.result
    elapsed = (time.perf_counter() - t) * 1000
    if result is None or not result.ok or result.value_json != "1":
        raise SystemExit(f"sandbox bench: unexpected result {result}")
    return elapsed


async def _sequential(stub: sb_grpc.SandboxServiceStub, language: int, code: str, n: int) -> dict[str, float]:
    for _ in range(3):  # warm-up: page cache, first connection
        await _execute(stub, language, code)
    return _stats([await _execute(stub, language, code) for _ in range(n)])


async def _parallel(stub: sb_grpc.SandboxServiceStub, concurrency: int, total: int) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await _execute(stub, sb_pb.LANGUAGE_PYTHON, PY_CODE)

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(total)))
    elapsed = time.perf_counter() - t
    return {"concurrency": concurrency, "runs": total, "runs_per_s": round(total / elapsed, 2)}


async def _wait_serving(address: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"sandbox bench: the service exited with {proc.returncode}")
            try:
                resp = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("sandbox bench: the service did not become SERVING")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer samples")
    n = 10 if ap.parse_args().quick else 40
    workers = 2
    port = _free_port()
    env = {**os.environ, "TRELLIS_SANDBOX_PORT": str(port), "TRELLIS_SANDBOX_METRICS_PORT": "0", "TRELLIS_SANDBOX_WORKERS": str(workers),
           **allocator_choice()[0]}  # the allocator `trellis up` gives it
    proc = subprocess.Popen([sys.executable, "-m", "services.sandbox"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    try:
        address = f"127.0.0.1:{port}"
        await _wait_serving(address, proc)
        async with grpc.aio.insecure_channel(address) as ch:
            stub = sb_grpc.SandboxServiceStub(ch)
            py = await _sequential(stub, sb_pb.LANGUAGE_PYTHON, PY_CODE, n)
            js = await _sequential(stub, sb_pb.LANGUAGE_JAVASCRIPT, JS_CODE, max(5, n // 2))
            par = await _parallel(stub, workers, n)
    finally:
        proc.terminate()
        proc.wait(30)
    py_floor = _bare([default_python(), "-I", "-B", "-c", "pass"], n)
    js_floor = _bare([default_node(), "-e", "0"], max(5, n // 2))
    summary = {
        "python_warm_start_p50_ms": py["p50_ms"],
        "python_warm_start_p95_ms": py["p95_ms"],
        "target_ms": TARGET_MS,
        "meets_target": py["p50_ms"] < TARGET_MS,
        "python_ratio_to_bare_interpreter": round(py["p50_ms"] / py_floor["p50_ms"], 2),
        "js_warm_start_p50_ms": js["p50_ms"],
        "js_ratio_to_bare_node": round(js["p50_ms"] / js_floor["p50_ms"], 2),
        "python_parallel_runs_per_s": par["runs_per_s"],
    }
    result = {
        "summary": summary,
        "python_warm_start": py,
        "js_warm_start": js,
        "python_parallel": par,
        "floor_bare_python": py_floor,
        "floor_bare_node": js_floor,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    out = ROOT / "bench" / "results" / "sandbox.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
