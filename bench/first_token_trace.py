"""Where an idle first token's time goes: the stack as `trellis up` starts it, the scripted model server, and
one streaming chat at a time through `/v1/chat/completions` (Begin -> LLM -> Message), 10 ms apart as bench (b)
sends them. Each process marks its steps (bench/step_trace/); this prints, for each step, the median time from
the client's send, and the median time to the client's first token.

    .venv/bin/python bench/first_token_trace.py [--requests 100]

A diagnostic, not part of `make bench`: the wrapped functions cost a few microseconds each.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pipeline_bench as pb  # noqa: E402  (bench/, on sys.path)

WARM_UP = 15


async def requests(url: str, agent: str, n: int) -> list[tuple[float, float]]:
    """(send, first token) perf_counter pairs, one request at a time."""
    target = pb.Target(url + "/v1/chat/completions", pb.AUTH, {"bench-5-0": agent})
    out = []
    async with pb.client_session() as session:
        for _ in range(n + WARM_UP):
            start = time.perf_counter()
            first, _, _, _ = await pb.stream_once(session, target, "bench-5-0")
            out.append((start, start + first))
            await asyncio.sleep(0.01)
    return out[WARM_UP:]


def steps(trace_dir: Path) -> list[tuple[float, str]]:
    marks = []
    for path in trace_dir.glob("steps-*.txt"):
        for line in path.read_text().splitlines():
            step, _, at = line.rpartition("\t")
            marks.append((float(at), step))
    return sorted(marks)


def traced_stack(prefix: str, **env: str) -> tuple[Path, subprocess.Popen, pb.Stack]:
    """The model server (running) and a stack (not started) whose processes mark their steps in the returned
    directory (bench/step_trace/), with `env` on top."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    trace_dir = tmp / "steps"
    trace_dir.mkdir()
    model_port = pb.free_port()
    model = subprocess.Popen([pb.PY, str(HERE / "model_server.py"), "--port", str(model_port)])
    stack = pb.Stack(f"http://127.0.0.1:{model_port}", tmp / "data")
    stack.env.update(TRELLIS_STEP_TRACE_DIR=str(trace_dir), **env)
    stack.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "step_trace"), stack.env.get("PYTHONPATH")]))
    pb.wait_port(model_port)
    return trace_dir, model, stack


def table(marks: list[tuple[float, str]], windows: list[tuple[float, float]]) -> list[tuple[float, str, int]]:
    """(median ms from the send, step, how many requests had it); a step seen again in one request is numbered."""
    offsets: dict[str, list[float]] = collections.defaultdict(list)
    for sent, first in windows:
        seen: collections.Counter = collections.Counter()
        for at, step in marks:
            if sent <= at <= first:
                seen[step] += 1
                offsets[step if seen[step] == 1 else f"{step} #{seen[step]}"].append((at - sent) * 1000)
        offsets["client: first token"].append((first - sent) * 1000)
    rows = [(statistics.median(v), k, len(v)) for k, v in offsets.items() if len(v) >= len(windows) // 2]
    return sorted(rows)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    trace_dir, model, stack = traced_stack("trellis-trace-")
    try:
        stack.start()
        agent = await pb.create_agent(stack.url, pb.streaming_canvas("bench-5-0"))
        windows = await requests(stack.url, agent, args.requests)
    finally:
        stack.stop()
        model.terminate()
    rows = table(steps(trace_dir), windows)
    print(f"{'ms from send':>12}  step (requests that had it, of {len(windows)})")
    for ms, step, count in rows:
        print(f"{ms:12.3f}  {step} ({count})")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
