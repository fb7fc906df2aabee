#!/usr/bin/env python3
"""What a gRPC call costs in CPU, beside the same exchange as messages on a stream that stays open.

Every run crosses two gRPC hops (gateway -> orchestrator -> llm_gateway), each a server-streaming call of its
own. This bench prices one such hop in grpc.aio, client and server each a process on the services' loop:

  call   a server-streaming call per exchange: one request, five small messages back (a short run's stream);
  open   the same request and five messages on a bidirectional stream opened once and kept (one per client
         coroutine): what an exchange would cost if calls were multiplexed on long-lived streams.

100 exchanges run at once, as in a burst of runs; CPU is counted per exchange in each process (the client's
`time.process_time`, the server's `/proc/<pid>/task/*/schedstat`), in alternating rounds. The difference is
what a call itself costs (grpc.aio's call objects, tasks and HTTP/2 stream), the floor under a run's start
that no work of Trellis's own removes (docs/streaming.md).

Usage: python bench/grpc_call_bench.py [--quick]   -> bench/results/grpc_call.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from services.common import event_loop  # noqa: E402  (the loop the services run on)

MESSAGES = 5  # messages back per exchange
CONCURRENT = 100
SERVICE = "floor.Calls"


async def serve() -> None:
    async def per_call(request: bytes, context):
        for _ in range(MESSAGES):
            yield b"qz "

    async def on_open_stream(requests, context):
        async for _ in requests:
            for _ in range(MESSAGES):
                yield b"qz "

    handlers = {"Call": grpc.unary_stream_rpc_method_handler(per_call),
                "Open": grpc.stream_stream_rpc_method_handler(on_open_stream)}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def cpu_s(pid: int) -> float:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total / 1e9


async def measure(mode: str, exchanges: int) -> dict[str, float]:
    """CPU per exchange, in microseconds, in the client (this process) and a fresh server process."""
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_stream(f"/{SERVICE}/Call")
            streams = [channel.stream_stream(f"/{SERVICE}/Open")() for _ in range(CONCURRENT)] if mode == "open" else []

            async def exchange(i: int) -> None:
                if mode == "call":
                    async for _ in call(b"q"):
                        pass
                    return
                stream = streams[i]
                await stream.write(b"q")
                for _ in range(MESSAGES):
                    await stream.read()

            async def rounds(n: int) -> None:
                for _ in range(n):
                    await asyncio.gather(*(exchange(i) for i in range(CONCURRENT)))

            await rounds(3)  # warm: the channel, the streams, both processes' code paths
            client0, server0 = time.process_time(), cpu_s(server.pid)
            await rounds(exchanges // CONCURRENT)
            client1, server1 = time.process_time(), cpu_s(server.pid)
            for stream in streams:
                await stream.done_writing()
        n = exchanges // CONCURRENT * CONCURRENT
        return {"client_us": (client1 - client0) / n * 1e6, "server_us": (server1 - server0) / n * 1e6}
    finally:
        server.kill()
        server.wait()


async def main(quick: bool) -> None:
    rounds, exchanges = (2, 1000) if quick else (6, 3000)
    samples: dict[str, list[dict[str, float]]] = {"call": [], "open": []}
    for _ in range(rounds):
        for mode in samples:
            samples[mode].append(await measure(mode, exchanges))
    result: dict = {"concurrent": CONCURRENT, "messages_per_exchange": MESSAGES, "rounds": rounds,
                    "exchanges_per_round": exchanges}
    for mode, runs in samples.items():
        result[mode] = {side: round(statistics.median(r[side] for r in runs), 1) for side in ("client_us", "server_us")}
        result[mode]["both_us"] = round(result[mode]["client_us"] + result[mode]["server_us"], 1)
        result[mode]["rounds"] = runs
    result["summary"] = {
        "call_us_per_exchange": result["call"]["both_us"],
        "open_stream_us_per_exchange": result["open"]["both_us"],
        "call_itself_us": round(result["call"]["both_us"] - result["open"]["both_us"], 1),
    }
    out = ROOT / "bench" / "results" / "grpc_call.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    event_loop.run(serve() if args.serve else main(args.quick))
