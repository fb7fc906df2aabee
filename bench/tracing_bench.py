#!/usr/bin/env python3
"""What OpenTelemetry costs the engine per component: a 100-node no-op chain (engine_bench's chain100), run
after run, alternating three modes in the same process so they share the machine's noise:

  off          no OTEL_* exporter configured (the default): the runner's hooks see no RunTrace
  on_sampled   a TracerProvider whose spans are all recorded and handed to a BatchSpanProcessor (the
               exporter at its end drops them, so only Trellis's and the SDK's work is measured)
  on_dropped   tracing configured but the sampler drops every trace (OTEL_TRACES_SAMPLER=always_off)

Per-node cost = median run time / 100. Half the rounds run the modes in reverse order (the first of a
round is favoured). The "off" line is what every deployment without OTEL_* pays.

Usage: python bench/tracing_bench.py [--quick]   -> bench/results/tracing.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_bench import chain_canvas, engine_runner, interleaved, summarize  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF  # noqa: E402

from services.common import tracing  # noqa: E402

NODES = 100


class _Drop(SpanExporter):
    def export(self, spans: Sequence[object]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider(sampler: object | None = None) -> TracerProvider:
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=65536))
    return provider


async def main(quick: bool) -> dict:
    once = engine_runner(chain_canvas(NODES))
    sampled, dropped = _provider(), _provider(ALWAYS_OFF)

    def mode(provider: TracerProvider | None):
        async def run_once() -> None:
            tracing.use(provider)
            try:
                await once()
            finally:
                tracing.use(None)
        return run_once

    names = ["off", "on_sampled", "on_dropped"]
    fns = [mode(None), mode(sampled), mode(dropped)]
    reps, budget = (40, 10) if quick else (300, 45)
    # Whichever runs first in a round is measurably favoured: half the rounds in each order.
    forward = await interleaved(fns, reps=reps, budget_s=budget)
    backward = await interleaved(fns[::-1], reps=reps, budget_s=budget)
    samples = [f + b for f, b in zip(forward, backward[::-1])]
    sampled.shutdown()
    dropped.shutdown()
    runs = {name: summarize(xs) for name, xs in zip(names, samples)}
    per_node_us = {name: round(r["median"] * 1000 / NODES, 2) for name, r in runs.items()}
    return {
        "what": f"engine, {NODES}-node no-op chain, per node, tracing off vs on (median of interleaved runs)",
        "summary": {"per_node_us": per_node_us,
                    "on_sampled_extra_us_per_node": round(per_node_us["on_sampled"] - per_node_us["off"], 2),
                    "on_dropped_extra_us_per_node": round(per_node_us["on_dropped"] - per_node_us["off"], 2)},
        "runs_ms": runs, "python": platform.python_version(), "machine": platform.machine(), "quick": quick,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main(args.quick))
    out = ROOT / "bench" / "results" / "tracing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"]))
