"""Where a burst's last first token goes: the stack as `trellis up` starts it, the scripted model server, and
bursts of 100 streaming chats at once through `/v1/chat/completions` (Begin -> LLM -> Message), as bench (c)
sends them. Each process marks its steps and the orchestrator times its loop (bench/step_trace/). Prints:

- for each step, when its 1st, 25th, 50th, 75th and 99th occurrence came, in ms from the burst's start
  (bench (c)'s paced model, 200 tokens at 10 ms);
- how many loop turns passed between two Run calls the orchestrator took, and how busy its loop was;
- the orchestrator's loop callbacks per run, by what they ran (bursts of 5-token streams).

    .venv/bin/python bench/burst_trace.py

A diagnostic, not part of `make bench`: the wrapped functions and the timed loop cost time of their own, and
the stack runs on asyncio's own loop (TRELLIS_UVLOOP=0), whose turns can be timed.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pipeline_bench as pb  # noqa: E402  (bench/, on sys.path)
from first_token_trace import traced_stack  # noqa: E402

STREAMS = 100
COUNTED_BURSTS = 3


async def burst(target: pb.Target, shape: str) -> tuple[float, list[float]]:
    """(start, each stream's first token), perf_counter."""
    firsts: list[float] = []
    async with pb.client_session(STREAMS + 10) as session:
        await asyncio.gather(*(pb.stream_once(session, target, "bench-5-0") for _ in range(20)))
        await asyncio.sleep(0.5)
        start = time.perf_counter()
        await asyncio.gather(*(pb.stream_once(session, target, shape, lambda: firsts.append(time.perf_counter()))
                               for _ in range(STREAMS)))
    return start, sorted(firsts)


def lines(trace_dir: Path, pattern: str) -> list[list[str]]:
    return [line.split("\t") for path in trace_dir.glob(pattern) for line in path.read_text().splitlines()]


def clear(trace_dir: Path) -> None:
    for path in trace_dir.iterdir():
        path.write_text("")


def step_table(trace_dir: Path, start: float, firsts: list[float]) -> None:
    marks: dict[str, list[float]] = collections.defaultdict(list)
    for step, at in lines(trace_dir, "steps-*.txt"):
        if float(at) >= start:
            marks[step].append(float(at))
    marks["client: first token"] = firsts
    picks = (0, 24, 49, 74, 98)
    rows = []
    for step, times in marks.items():
        times.sort()
        rows.append(([round(1000 * (times[min(k, len(times) - 1)] - start), 1) for k in picks], step, len(times)))
    print(f"{'1st':>7} {'25th':>7} {'50th':>7} {'75th':>7} {'99th':>7}  step (occurrences)")
    for at, step, count in sorted(rows):
        print(" ".join(f"{x:7.1f}" for x in at), f" {step} ({count})")


def accept_gaps(trace_dir: Path) -> None:
    taken = sorted(float(at) for step, at in lines(trace_dir, "steps-*.txt") if step == "orchestrator: Run >")[-STREAMS:]
    turns = sorted((float(a), float(b)) for kind, a, b in (x for x in lines(trace_dir, "loop-*.txt") if x[0] == "T"))
    starts = [a for a, _ in turns]
    between = [bisect.bisect(starts, b) - bisect.bisect(starts, a) for a, b in zip(taken, taken[1:])]
    window = [(a, b) for a, b in turns if taken[0] <= a <= taken[-1]]
    print(f"\nRun calls taken over {1000 * (taken[-1] - taken[0]):.1f} ms; loop busy "
          f"{1000 * sum(b - a for a, b in window):.1f} ms of it; loop turns between two calls taken: median "
          f"{statistics.median(between)}, counts {sorted(collections.Counter(between).items())}")


def callbacks(trace_dir: Path, runs: int) -> None:
    count: collections.Counter = collections.Counter()
    spent: collections.Counter = collections.Counter()
    for row in lines(trace_dir, "loop-*.txt"):
        if row[0] == "H":
            count[row[1]] += 1
            spent[row[1]] += float(row[3]) - float(row[2])
    print(f"\norchestrator loop callbacks per run: {sum(count.values()) / runs:.1f}, "
          f"{1e6 * sum(spent.values()) / runs:.0f} us (traced)")
    for name, n in count.most_common(25):
        print(f"{n / runs:7.2f} {1e6 * spent[name] / runs:8.1f} us  {name}")


async def main() -> int:
    # The loop trace times asyncio's own loop (uvloop's turns and callbacks cannot be wrapped from Python).
    trace_dir, model, stack = traced_stack("trellis-burst-", TRELLIS_LOOP_TRACE="1", TRELLIS_UVLOOP="0")
    try:
        stack.start()
        paced = await pb.create_agent(stack.url, pb.streaming_canvas("bench-200-10"))
        short = await pb.create_agent(stack.url, pb.streaming_canvas("bench-5-10"))
        warm = await pb.create_agent(stack.url, pb.streaming_canvas("bench-5-0"))
        target = pb.Target(stack.url + "/v1/chat/completions", pb.AUTH,
                           {"bench-200-10": paced, "bench-5-10": short, "bench-5-0": warm})
        await burst(target, "bench-5-10")
        clear(trace_dir)
        start, firsts = await burst(target, "bench-200-10")
        await asyncio.sleep(0.5)
        step_table(trace_dir, start, firsts)
        accept_gaps(trace_dir)
        clear(trace_dir)
        for _ in range(COUNTED_BURSTS):
            await burst(target, "bench-5-10")
        await asyncio.sleep(0.5)
    finally:
        stack.stop()
        model.terminate()
    callbacks(trace_dir, COUNTED_BURSTS * (STREAMS + 20))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
