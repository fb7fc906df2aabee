"""Two checkouts of Trellis side by side in one run: both stacks up at once on one model server, measured in
alternating rounds with the pipeline bench's own clients, so whatever else the machine does hits both alike.
For a before/after check of a change on a shared, noisy machine, where two runs of `make bench` minutes
apart differ by more than the change.

    git worktree add /tmp/before <rev>; (cd /tmp/before && ../main/.venv/bin/python scripts/gen_protos.py)
    git worktree add /tmp/after <rev>;  (cd /tmp/after && ../main/.venv/bin/python scripts/gen_protos.py)
    .venv/bin/python scripts/gen_protos.py   # the venv's .pth back to this checkout's generated code
    .venv/bin/python bench/side_by_side.py --before /tmp/before --after /tmp/after [--rounds 8]

Each stack runs from its own tree with its own generated code (PYTHONPATH) on this venv. Per round, for each
stack in turn (the order alternates): (a) one stream of 4,000 tokens, tokens/s; (b) idle time to first token,
p50, minus the model's own (measured in the same round); (c) 100 streams of a paced model: stream p99 and
first-token p99; (d) 100 unpaced streams, aggregate tokens/s; (e) closed loops of 100 clients, runs/s, for the
3-node canvas without a model and the 5-node canvas with one LLM. Writes bench/results/side_by_side.json: every
round, the medians, and the median of the per-round ratios after/before (a pair shares the machine's state).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pipeline_bench as pb  # noqa: E402  (bench/, on sys.path as the script's directory)

OUT = HERE / "results" / "side_by_side.json"


class TreeStack(pb.Stack):
    """`trellis up` from another checkout, with that checkout's generated code first on the path."""

    def __init__(self, tree: Path, model_url: str, data: Path) -> None:
        super().__init__(model_url, data)
        self.root = tree
        self.env["PYTHONPATH"] = f"{tree}/gen/python:{tree}"


async def agents_of(url: str) -> dict[str, str]:
    shapes = ("bench-5-0", "bench-4000-0", "bench-200-10", "bench-300-0")
    agents = {shape: await pb.create_agent(url, pb.streaming_canvas(shape)) for shape in shapes}
    agents["no_model"] = await pb.create_agent(url, pb.NO_MODEL)
    agents["one_llm"] = await pb.create_agent(url, pb.ONE_LLM)
    return agents


async def one_round(target: pb.Target, direct_ttft_p50_ms: float) -> dict[str, float]:
    r: dict[str, float] = {"a_tokens_per_s": (await pb.one_long_stream(target, 4000, repeats=3))["tokens_per_s"]}
    r["b_ttft_overhead_p50_ms"] = (await pb.idle_ttft(target, 40))["p50_ms"] - direct_ttft_p50_ms
    await asyncio.sleep(0.5)  # the previous streams' runs are stored
    paced = await pb.concurrent_streams(target, 100, "bench-200-10", 200)
    r["c_stream_p99_s"], r["c_first_token_p99_ms"] = paced["stream_p99_s"], paced["first_token_p99_ms"]
    await asyncio.sleep(0.5)
    r["d_aggregate_tokens_per_s"] = (await pb.concurrent_streams(target, 100, "bench-300-0", 300))["aggregate_tokens_per_s"]
    r["e_no_model_runs_per_s"] = (await pb.closed_loop(target, "no_model", 100, 6))["runs_per_s"]
    r["e_one_llm_runs_per_s"] = (await pb.closed_loop(target, "one_llm", 100, 6))["runs_per_s"]
    return r


async def measure(trees: dict[str, Path], rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="trellis-side-by-side-"))
    model_port = pb.free_port()
    model = subprocess.Popen([pb.PY, str(HERE / "model_server.py"), "--port", str(model_port)])
    model_url = f"http://127.0.0.1:{model_port}"
    stacks = {name: TreeStack(tree, model_url, tmp / name) for name, tree in trees.items()}
    out: dict[str, Any] = {"trees": {k: str(v) for k, v in trees.items()}, "rounds": rounds,
                           "load_average_at_start": os.getloadavg(), "per_round": {name: [] for name in stacks}}
    try:
        pb.wait_port(model_port)
        for stack in stacks.values():
            stack.start()
        targets = {name: pb.Target(s.url + "/v1/chat/completions", pb.AUTH, await agents_of(s.url))
                   for name, s in stacks.items()}
        direct = pb.Target(model_url + "/v1/chat/completions", {}, {})
        for i in range(rounds):
            direct_ttft = (await pb.idle_ttft(direct, 40))["p50_ms"]
            for name in (list(stacks) if i % 2 == 0 else list(stacks)[::-1]):
                result = await one_round(targets[name], direct_ttft)
                out["per_round"][name].append({**result, "load": os.getloadavg()[0]})
                print(i, name, {k: round(v, 2) for k, v in result.items()}, flush=True)
    finally:
        for stack in stacks.values():
            stack.stop()
        model.terminate()
        model.wait(10)
    keys = [k for k in out["per_round"]["before"][0] if k != "load"]
    out["median"] = {name: {k: statistics.median(r[k] for r in runs) for k in keys}
                     for name, runs in out["per_round"].items()}
    pairs = list(zip(out["per_round"]["after"], out["per_round"]["before"]))
    out["paired_ratio_after_over_before_median"] = {k: round(statistics.median(a[k] / b[k] for a, b in pairs), 3)
                                                    for k in keys}
    out["load_average_at_end"] = os.getloadavg()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout with its protos generated")
    parser.add_argument("--after", type=Path, required=True, help="a checkout with its protos generated")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    out = asyncio.run(measure({"before": args.before.resolve(), "after": args.after.resolve()}, args.rounds))
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"median": out["median"],
                      "paired_ratio_after_over_before_median": out["paired_ratio_after_over_before_median"]}, indent=1))
    print(f"written: {OUT.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
