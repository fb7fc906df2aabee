#!/usr/bin/env python3
"""Canvas engine alone, in one process, with no-op components, against floors measured in the same run.

Shapes:
  chain100     begin -> 99 no-op nodes (100 nodes), ms per run and per node
  diamond100   begin -> 98 parallel no-op nodes -> join (100 nodes)
  conc100      100 concurrent runs of begin -> 10 nodes that each wait 10 ms (ideal 100 ms per run)

Floors: hand-written asyncio DAG executors, below
(`dynamic_ready`: a node starts when its deps are done, one task per node — the same semantics as the
engine; `layered_fast`: precomputed layers, 1-node layers awaited inline). LangGraph on the same shapes
when it is importable (it is not a dependency; the result says so when it is missing).
The engine is measured as the run manager consumes it: every event taken from `start(...).batches()`.

Usage: python bench/engine_bench.py [--quick]   -> bench/results/engine.json
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.orchestrator.components.base import Component, NodeContext, register  # noqa: E402
from services.orchestrator.engine.dsl import load_canvas  # noqa: E402
from services.orchestrator.engine.events import RunFinished  # noqa: E402
from services.orchestrator.engine.runner import start  # noqa: E402
from services.orchestrator.engine.settings import EngineSettings, Services  # noqa: E402
from services.orchestrator.engine.state import RunRequest, SessionState  # noqa: E402
from services.orchestrator.engine.validate import compile_plan  # noqa: E402

perf = time.perf_counter


# ------------------------------------------------------------------------ bench components
@register
class BenchNoop(Component):
    component_name = "BenchNoop"

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("n", 1)


@register
class BenchSleep(Component):
    component_name = "BenchSleep"

    async def run(self, ctx: NodeContext) -> None:
        await asyncio.sleep(0.01)


# ------------------------------------------------------------------------ helpers
def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def summarize(samples_s: list[float]) -> dict[str, float]:
    xs = [x * 1e3 for x in samples_s]
    return {"n": len(xs), "min": round(min(xs), 4), "median": round(statistics.median(xs), 4),
            "p99": round(pct(xs, 99), 4), "mean": round(statistics.fmean(xs), 4), "max": round(max(xs), 4)}


async def bench(afn: Callable[[], Awaitable[Any]], reps: int, budget_s: float) -> list[float]:
    return (await interleaved([afn], reps, budget_s))[0]


async def interleaved(fns: list[Callable[[], Awaitable[Any]]], reps: int, budget_s: float) -> list[list[float]]:
    """Time several executors rep by rep, alternating, so that they share the machine's noise
    (it is shared with other work: a burst must not land on one executor only)."""
    for _ in range(10):
        for fn in fns:
            await fn()
    out: list[list[float]] = [[] for _ in fns]
    t_end = perf() + budget_s
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = perf()
            await fn()
            out[i].append(perf() - t0)
        if perf() > t_end and len(out[0]) >= 20:
            break
    return out


# ------------------------------------------------------------------------ engine shapes
def _cpn(name: str, down: list[str], up: list[str]) -> dict[str, Any]:
    return {"obj": {"component_name": name, "params": {}}, "downstream": down, "upstream": up}


def chain_canvas(n_nodes: int, kind: str = "BenchNoop") -> dict[str, Any]:
    ids = ["begin"] + [f"{kind}:N{i}" for i in range(1, n_nodes)]
    comps = {}
    for i, cid in enumerate(ids):
        comps[cid] = _cpn("Begin" if i == 0 else kind, ids[i + 1:i + 2], ids[i - 1:i] if i else [])
    return {"components": comps}


def diamond_canvas(n_total: int) -> dict[str, Any]:
    mids = [f"BenchNoop:M{i}" for i in range(n_total - 2)]
    comps = {"begin": _cpn("Begin", mids, []), "BenchNoop:Join": _cpn("BenchNoop", [], mids)}
    for m in mids:
        comps[m] = _cpn("BenchNoop", ["BenchNoop:Join"], ["begin"])
    return {"components": comps}


async def consume(plan: Any, run_id: str, services: Services) -> int:
    """Run `plan` to its end the way the run manager does; the number of events."""
    n = 0
    async for batch in start(plan, RunRequest(run_id=run_id), SessionState(), services).batches():
        n += len(batch)
        last = batch[-1]
    if not isinstance(last, RunFinished) or last.error:
        raise RuntimeError(getattr(last, "error", "no RunFinished"))
    return n


def engine_runner(dsl: dict[str, Any]) -> Callable[[], Awaitable[int]]:
    plan = compile_plan(load_canvas(dsl))
    services = Services(settings=EngineSettings())
    counter = [0]

    async def once() -> int:
        counter[0] += 1
        return await consume(plan, f"r{counter[0]}", services)
    return once


# ------------------------------------------------------------------------ asyncio floor
class Dag:
    """The two floors: dynamic_ready (one task per node) and layered_fast (precomputed layers)."""

    def __init__(self, nodes: dict[str, Any], edges: list[tuple[str, str]]) -> None:
        self.nodes = nodes
        self.succ: dict[str, list[str]] = defaultdict(list)
        self.indeg = {n: 0 for n in nodes}
        for a, b in edges:
            self.succ[a].append(b)
            self.indeg[b] += 1
        indeg = dict(self.indeg)
        layer = [n for n, d in indeg.items() if d == 0]
        self.layers: list[list[str]] = []
        while layer:
            self.layers.append(layer)
            nxt = []
            for n in layer:
                for m in self.succ[n]:
                    indeg[m] -= 1
                    if indeg[m] == 0:
                        nxt.append(m)
            layer = nxt

    async def run_dynamic(self, state: dict[str, Any]) -> dict[str, Any]:
        state = dict(state)
        indeg = dict(self.indeg)
        running = {asyncio.ensure_future(self.nodes[n](dict(state))): n for n, d in indeg.items() if d == 0}
        while running:
            done, _ = await asyncio.wait(running.keys(), return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                n = running.pop(t)
                state.update(t.result() or {})
                for m in self.succ[n]:
                    indeg[m] -= 1
                    if indeg[m] == 0:
                        running[asyncio.ensure_future(self.nodes[m](dict(state)))] = m
        return state

    async def run_layered_fast(self, state: dict[str, Any]) -> dict[str, Any]:
        state = dict(state)
        for layer in self.layers:
            if len(layer) == 1:
                state.update(await self.nodes[layer[0]](state) or {})
                continue
            snap = dict(state)
            for u in await asyncio.gather(*(self.nodes[n](snap) for n in layer)):
                state.update(u or {})
        return state


async def _inc(s: dict[str, Any]) -> dict[str, Any]:
    return {"n": s.get("n", 0) + 1}


async def _sleep_node(s: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0.01)
    return {"n": s.get("n", 0) + 1}


def floor_chain(n: int, fn: Any = _inc) -> Dag:
    names = [f"n{i}" for i in range(n)]
    return Dag({x: fn for x in names}, list(zip(names, names[1:])))


def floor_diamond(n_total: int) -> Dag:
    mids = [f"m{i}" for i in range(n_total - 2)]
    nodes = {"begin": _inc, "join": _inc, **{m: _inc for m in mids}}
    return Dag(nodes, [("begin", m) for m in mids] + [(m, "join") for m in mids])


# ------------------------------------------------------------------------ langgraph
try:  # LangGraph is optional: measured when importable
    import operator
    from typing import Annotated

    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class _LgChain(TypedDict):
        n: int

    class _LgFan(TypedDict):
        n: Annotated[int, operator.add]
    HAVE_LANGGRAPH = True
except ImportError:
    HAVE_LANGGRAPH = False


def langgraph_shapes() -> dict[str, Any] | None:
    if not HAVE_LANGGRAPH:
        return None
    S, F = _LgChain, _LgFan

    async def node(s: Any) -> dict[str, int]:
        return {"n": s["n"] + 1}

    async def one(s: Any) -> dict[str, int]:
        return {"n": 1}

    async def sleepy(s: Any) -> dict[str, int]:
        await asyncio.sleep(0.01)
        return {"n": s["n"] + 1}

    def chain(n: int, fn: Any) -> Any:
        g = StateGraph(S)
        names = [f"n{i}" for i in range(n)]
        for nm in names:
            g.add_node(nm, fn)
        g.add_edge(START, names[0])
        for a, b in zip(names, names[1:]):
            g.add_edge(a, b)
        g.add_edge(names[-1], END)
        return g.compile()

    g = StateGraph(F)
    mids = [f"m{i}" for i in range(98)]
    g.add_node("begin", one)
    g.add_node("join", one)
    for m in mids:
        g.add_node(m, one)
        g.add_edge("begin", m)
    g.add_edge(START, "begin")
    g.add_edge(mids, "join")
    g.add_edge("join", END)
    return {"chain100": chain(100, node), "diamond100": g.compile(), "conc_chain10": chain(10, sleepy),
            "version": _dist_version("langgraph")}


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


RL = {"recursion_limit": 10_000}


# ------------------------------------------------------------------------ scenarios
async def concurrent(submits: dict[str, Callable[[int], Awaitable[Any]]], n_runs: int,
                     rounds: int) -> dict[str, Any]:
    """Rounds of n_runs concurrent runs, executors alternating round by round (shared noise).
    Reports per-run latency over all rounds and the median of the per-round p99 (robust to one
    round hit by a burst of outside load)."""
    async def one_round(submit: Callable[[int], Awaitable[Any]]) -> tuple[float, list[float]]:
        lat: list[float] = [0.0] * n_runs
        t_sub = perf()

        async def one(i: int) -> None:
            await submit(i)
            lat[i] = perf() - t_sub
        await asyncio.gather(*(one(i) for i in range(n_runs)))
        return perf() - t_sub, lat

    data = {k: {"walls": [], "lats": [], "p99s": []} for k in submits}
    for submit in submits.values():
        await one_round(submit)  # warm-up
    for _ in range(rounds):
        for k, submit in submits.items():
            w, lat = await one_round(submit)
            data[k]["walls"].append(w)
            data[k]["lats"] += lat
            data[k]["p99s"].append(pct(lat, 99) * 1e3)
    return {k: {"total_wall_ms": summarize(v["walls"]), "per_run_latency_ms": summarize(v["lats"]),
                "p99_ms_median_of_rounds": round(statistics.median(v["p99s"]), 4)}
            for k, v in data.items()}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    reps, budget = (100, 2.0) if args.quick else (1000, 8.0)
    rounds = 3 if args.quick else 8
    res: dict[str, Any] = {}

    # a: chain100, b: diamond100 -------------------------------------------------
    for shape, dsl, dag in (("chain100", chain_canvas(100), floor_chain(100)),
                            ("diamond100", diamond_canvas(100), floor_diamond(100))):
        eng = engine_runner(dsl)
        events = await eng()
        samples = await interleaved([eng, lambda: dag.run_dynamic({"n": 0}),
                                     lambda: dag.run_layered_fast({"n": 0})], reps, budget)
        e, d, lf = (summarize(x) for x in samples)
        res[shape] = {"nodes": 100, "events_per_run": events, "engine_ms": e,
                      "floor_dynamic_ready_ms": d, "floor_layered_fast_ms": lf,
                      "per_node_us": {"engine": round(e["median"] * 10, 3),
                                      "floor_dynamic_ready": round(d["median"] * 10, 3),
                                      "floor_layered_fast": round(lf["median"] * 10, 3)}}
    one = engine_runner(chain_canvas(1))
    res["run_fixed_cost_ms"] = summarize(await bench(one, reps, budget))

    # c: 100 concurrent runs of a 10-node chain with 10 ms nodes --------------------
    eng10 = compile_plan(load_canvas(chain_canvas(11, "BenchSleep")))  # begin + 10 waiting nodes
    services = Services(settings=EngineSettings())

    async def engine_submit(i: int) -> None:
        await consume(eng10, f"c{i}", services)
    dag10 = floor_chain(10, _sleep_node)
    submits: dict[str, Callable[[int], Awaitable[Any]]] = {
        "engine": engine_submit,
        "floor_dynamic_ready": lambda i: dag10.run_dynamic({"n": 0}),
        "floor_layered_fast": lambda i: dag10.run_layered_fast({"n": 0})}
    lg = langgraph_shapes()
    if lg is not None:
        submits["langgraph"] = lambda i: lg["conc_chain10"].ainvoke({"n": 0}, RL)
    conc = await concurrent(submits, 100, rounds)
    res["conc100"] = {"concurrency": 100, "ideal_run_ms": 100.0, "rounds": rounds,
                      **{k: v for k, v in conc.items() if k != "langgraph"}}

    # LangGraph ------------------------------------------------------------------------
    if lg is None:
        res["langgraph"] = {"available": False,
                            "note": "langgraph is not installed: `pip install langgraph` to compare"}
    else:
        lg_reps = max(50, reps // 5)
        ch = summarize(await bench(lambda: lg["chain100"].ainvoke({"n": 0}, RL), lg_reps, budget))
        di = summarize(await bench(lambda: lg["diamond100"].ainvoke({"n": 0}, RL), lg_reps, budget))
        res["langgraph"] = {"available": True, "version": lg["version"], "chain100_ms": ch,
                            "diamond100_ms": di, "conc100": conc["langgraph"],
                            "per_node_us": {"chain100": round(ch["median"] * 10, 3),
                                            "diamond100": round(di["median"] * 10, 3)}}
    return res


def ratios(res: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for shape in ("chain100", "diamond100"):
        pn = res[shape]["per_node_us"]
        r = {"engine_vs_floor_dynamic_ready": round(pn["engine"] / pn["floor_dynamic_ready"], 3),
             "engine_vs_floor_layered_fast": round(pn["engine"] / pn["floor_layered_fast"], 3),
             "target_engine_vs_floor_max": 2.0}
        lg = res.get("langgraph", {})
        if lg.get("available"):
            r["langgraph_vs_engine"] = round(lg["per_node_us"][shape] / pn["engine"], 3)
            r["target_langgraph_vs_engine_min"] = 4.0
        out[shape] = r
    c = res["conc100"]
    e99 = c["engine"]["p99_ms_median_of_rounds"]
    out["conc100"] = {
        "engine_p50_ms": c["engine"]["per_run_latency_ms"]["median"],
        "engine_p99_ms": c["engine"]["per_run_latency_ms"]["p99"],
        "engine_p99_ms_median_of_rounds": e99,
        "p99_vs_floor_dynamic_ready": round(e99 / c["floor_dynamic_ready"]["p99_ms_median_of_rounds"], 3),
        "p99_vs_floor_layered_fast": round(e99 / c["floor_layered_fast"]["p99_ms_median_of_rounds"], 3),
        "p99_vs_ideal_100ms": round(e99 / 100.0, 3), "target_p99_vs_floor_max": 1.5}
    lg = res.get("langgraph", {})
    if lg.get("available"):
        out["conc100"]["langgraph_p99_vs_engine"] = round(lg["conc100"]["p99_ms_median_of_rounds"] / e99, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine.json"))
    args = ap.parse_args()
    res = asyncio.run(measure(args))
    doc = {"bench": "engine", "python": sys.version.split()[0], "platform": platform.platform(),
           "cpus": os.cpu_count(), "gc_enabled": gc.isenabled(), "quick": args.quick,
           "results": res, "ratios": ratios(res)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    sys.stdout.write(json.dumps(doc["ratios"], indent=2) + "\n")


if __name__ == "__main__":
    main()
