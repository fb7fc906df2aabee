"""What multiplexing would change in bench (c): the bare pipeline as it is (a gRPC call per chat at each hop)
against the same relays with every chat of a process on one long-lived bidirectional stream at one hop or
both (bench/stream_floors.py, `grpc-mux-relay`), in alternating bursts of 100 paced streams in front of the
same scripted model server. Prints, per shape, each burst's first-token p99, their median and
the CPU of each relay from the burst's start to its last first token.

    .venv/bin/python bench/mux_floor.py [--rounds 8]

A diagnostic, not part of `make bench`: it prices a design the services do not have (docs/streaming.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pipeline_bench as pb  # noqa: E402  (bench/, on sys.path)

FLOORS = str(HERE / "stream_floors.py")


def relays(mux_llm_hop: bool, mux_gateway_hop: bool, model_url: str) -> tuple[list[subprocess.Popen], pb.Target, dict]:
    """llm relay -> orchestrator relay -> gateway relay, each a process, each hop a call per chat or multiplexed:
    (processes, target, psutil handles)."""
    llm_port, orchestrator_port, gateway_port = pb.free_port(), pb.free_port(), pb.free_port()

    def server(mux: bool) -> str:
        return "grpc-mux-relay" if mux else "grpc-relay"

    def address(port: int, mux: bool) -> str:
        return f"{'mux:' if mux else ''}127.0.0.1:{port}"

    procs = {
        "llm_relay": subprocess.Popen([pb.PY, FLOORS, server(mux_llm_hop), "--port", str(llm_port),
                                       "--upstream", model_url]),
        "orchestrator_relay": subprocess.Popen([pb.PY, FLOORS, server(mux_gateway_hop), "--port", str(orchestrator_port),
                                                "--upstream", address(llm_port, mux_llm_hop)]),
        "gateway_relay": subprocess.Popen([pb.PY, FLOORS, "http-grpc", "--port", str(gateway_port),
                                           "--upstream", address(orchestrator_port, mux_gateway_hop)])}
    for port in (llm_port, orchestrator_port, gateway_port):
        pb.wait_port(port)
    target = pb.Target(f"http://127.0.0.1:{gateway_port}/v1/chat/completions", {}, {})
    return list(procs.values()), target, {name: psutil.Process(p.pid) for name, p in procs.items()}


SHAPES = {"call per chat": (False, False), "llm hop multiplexed": (True, False),
          "gateway hop multiplexed": (False, True), "both hops multiplexed": (True, True)}


async def main(rounds: int) -> None:
    model_port = pb.free_port()
    model_url = f"http://127.0.0.1:{model_port}"
    model = subprocess.Popen([pb.PY, str(HERE / "model_server.py"), "--port", str(model_port)])
    pb.wait_port(model_port)
    started = {name: relays(*hops, model_url) for name, hops in SHAPES.items()}
    shapes = {name: (target, ps) for name, (_, target, ps) in started.items()}
    bursts: dict[str, list[dict]] = {name: [] for name in shapes}
    try:
        for _ in range(rounds):
            for name, (target, ps) in shapes.items():
                await asyncio.sleep(1.0)
                bursts[name].append(await pb.concurrent_streams(target, 100, "bench-200-10", 200, ps))
    finally:
        for proc in [model, *(p for procs, _, _ in started.values() for p in procs)]:
            proc.terminate()
    out = {}
    for name, runs in bursts.items():
        p99s = [round(r["first_token_p99_ms"], 1) for r in runs]
        cpu = {k: statistics.median(r["cpu_ms_until_last_first_token"][k] for r in runs)
               for k in runs[0]["cpu_ms_until_last_first_token"]}
        out[name] = {"first_token_p99_ms": p99s, "median_ms": statistics.median(p99s),
                     "stream_p99_s_median": round(statistics.median(r["stream_p99_s"] for r in runs), 3),
                     "cpu_ms_until_last_first_token_median": cpu}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    asyncio.run(main(parser.parse_args().rounds))
