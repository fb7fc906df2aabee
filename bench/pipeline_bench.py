"""`make bench`, the whole pipeline: HTTP clients -> gateway -> orchestrator replicas -> llm_gateway -> a scripted
OpenAI-compatible model server (bench/model_server.py, one token per SSE chunk), with the stack started the way
`trellis up` starts it, and the same model server called directly by the same client in the same run.

    .venv/bin/python bench/pipeline_bench.py [--quick] [--no-profile]

Measures (each beside its direct counterpart): (a) one long stream, tokens/s; (b) time to first token over an
idle pipe, p50/p99, and the overhead; (c) 100 concurrent streams of a paced model (10 ms per token, 200
tokens): stream time p99, first token p99; (d) aggregate tokens/s over 100 unpaced streams; (e) a closed loop
of 100 clients: runs/s and p50/p99 for a 3-node canvas without a model and a 5-node canvas with one LLM;
(f) RSS of each process idle and after 10,000 one-turn sessions. Also, in the same run: the floors of the
hops (a bare aiohttp SSE relay, a chain of three of them for (b) and (c): as many Python processes as a token
crosses in the pipeline, a bare grpc.aio stream, and the "bare pipeline": aiohttp -> grpc.aio -> grpc.aio ->
the model server, the pipeline's own hops with nothing else: bench/stream_floors.py), the floor of the run path
under the same closed loop (bench/run_floor.py), CPU milliseconds per run of each process, Redis commands and
round trips per run, and py-spy profiles of each process under the closed loop. Writes bench/results/pipeline.json.

Clients count tokens as occurrences of `qz` in the bytes they receive, so any framing (one token or many per
event) counts the same, and parsing costs the client nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import aiohttp
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
import stream_floors  # noqa: E402  (bench/, on sys.path as the script's directory)

perf = time.perf_counter
KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PY = sys.executable


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 60000:  # leaves room for replica ports (port + 1000 i)
            return port


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status in (200, 404, 405):
                    return
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 405):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"pipeline bench: {url} did not come up")
        time.sleep(0.2)


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"pipeline bench: nothing listens on {port}")
        time.sleep(0.1)


# ---- clients --------------------------------------------------------------------------------------------

class Target:
    """Where a client sends a chat completion: the model server itself, a floor, or the pipeline."""

    def __init__(self, url: str, headers: dict[str, str], model_of: dict[str, str]) -> None:
        self.url = url
        self.headers = headers
        self.model_of = model_of  # model shape ("bench-200-10") -> the `model` this target wants

    def body(self, shape: str, stream: bool) -> dict[str, Any]:
        return {"model": self.model_of.get(shape, shape), "stream": stream,
                "messages": [{"role": "user", "content": "go"}]}


async def stream_once(session: aiohttp.ClientSession, target: Target, shape: str,
                      on_first: Callable[[], None] | None = None) -> tuple[float, float, int, int]:
    """(seconds to the first token, seconds to the end, tokens, SSE events) of one streamed completion;
    `on_first` is called when its first token arrives."""
    start = perf()
    first = None
    count = events = 0
    tail = b""
    async with session.post(target.url, json=target.body(shape, True), headers=target.headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{target.url}: HTTP {resp.status}: {(await resp.read())[:300]!r}")
        async for chunk in resp.content.iter_any():
            data = tail + chunk  # the last 4 bytes before: a token or a "data:" split between reads counts once
            found = data.count(b"qz") - tail.count(b"qz")
            if found:
                count += found
                if first is None:
                    first = perf()
                    if on_first is not None:
                        on_first()
            events += data.count(b"data:")
            tail = data[-4:]
    end = perf()
    return (first or end) - start, end - start, count, events


async def complete_once(session: aiohttp.ClientSession, target: Target, shape: str) -> float:
    start = perf()
    async with session.post(target.url, json=target.body(shape, False), headers=target.headers) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{target.url}: HTTP {resp.status}: {body[:300]!r}")
    return perf() - start


def client_session(limit: int = 200) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit), timeout=aiohttp.ClientTimeout(total=600))


async def one_long_stream(target: Target, tokens: int, repeats: int = 5) -> dict[str, Any]:
    """One stream of `tokens` at a time, `repeats` times after a warm-up of the same request: tokens/s of the
    median (a stream of a few tens of milliseconds: one scheduling hiccup decides a single try), min and max."""
    async with client_session() as s:
        await stream_once(s, target, f"bench-{tokens}-0")  # warm the connection, the plan and the model's route
        seconds = []
        for _ in range(repeats):
            _, total, count, _ = await stream_once(s, target, f"bench-{tokens}-0")
            assert count == tokens, f"{target.url}: {count} of {tokens} tokens arrived"
            seconds.append(total)
    median = pct(seconds, 50)
    return {"tokens": tokens, "seconds": median, "tokens_per_s": tokens / median,
            "tokens_per_s_min": tokens / max(seconds), "tokens_per_s_max": tokens / min(seconds), "repeats": repeats}


async def idle_ttft(target: Target, n: int) -> dict[str, Any]:
    async with client_session() as s:
        for _ in range(5):
            await stream_once(s, target, "bench-5-0")
        firsts = []
        for _ in range(n):
            first, _, count, _ = await stream_once(s, target, "bench-5-0")
            assert count == 5
            firsts.append(first * 1000)
            await asyncio.sleep(0.01)  # an idle pipe between requests
    return {"p50_ms": pct(firsts, 50), "p99_ms": pct(firsts, 99), "n": n}


def cpu_seconds(procs: dict[str, psutil.Process]) -> dict[str, float]:
    return {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}


async def concurrent_streams(target: Target, streams: int, shape: str, tokens: int,
                             procs: dict[str, psutil.Process] | None = None) -> dict[str, Any]:
    """`procs`: also the CPU each of these processes spent from the start until the last first token arrived
    (psutil's clock ticks: 10 ms steps), where 100 starts at once meet on two cores."""
    firsts_seen: list[dict[str, float]] = []

    def first_arrived() -> None:
        firsts_seen.append({})
        if procs and len(firsts_seen) == streams:
            firsts_seen[-1] = cpu_seconds(procs)

    async with client_session(streams + 10) as s:
        # As many short streams at once as the burst has: every connection pool on the way (this client's, the
        # llm_gateway's to the model) holds what the burst needs, as under steady load. A first burst after
        # idle also pays for opening them (about 100 TCP connects to the model: docs/streaming.md).
        await asyncio.gather(*(stream_once(s, target, "bench-5-0") for _ in range(streams)))
        await asyncio.sleep(0.5)  # their runs are stored before the burst
        cpu_at_start = cpu_seconds(procs) if procs else {}
        start = perf()
        results = await asyncio.gather(*(stream_once(s, target, shape, first_arrived) for _ in range(streams)))
        wall = perf() - start
    total = sum(c for _, _, c, _ in results)
    assert total == streams * tokens, f"{target.url}: {total} of {streams * tokens} tokens arrived"
    firsts = [f * 1000 for f, _, _, _ in results]
    ends = [e for _, e, _, _ in results]
    return {"streams": streams, "stream_p50_s": pct(ends, 50), "stream_p99_s": pct(ends, 99),
            "first_token_p50_ms": pct(firsts, 50), "first_token_p99_ms": pct(firsts, 99),
            "aggregate_tokens_per_s": total / wall, "wall_s": wall,
            "events_per_stream": sum(n for _, _, _, n in results) / streams,
            **({"cpu_ms_until_last_first_token": {k: round(1000 * (v - cpu_at_start[k])) for k, v in firsts_seen[-1].items()}}
               if procs else {})}


C_ROUNDS, C_ROUNDS_QUICK = 5, 2  # (c)'s alternating rounds of the pipeline and the bare pipeline

WARM_UP_S = 2.0  # a closed loop's first seconds: 100 clients starting at once, a burst no steady load has


async def closed_loop(target: Target, shape: str, clients: int, seconds: float) -> dict[str, Any]:
    """`clients` clients, each sending its next request when the last one is answered, for WARM_UP_S + `seconds`;
    runs/s and latencies count the requests started in the last `seconds` (the steady state), `runs_all`
    every request (what the processes' CPU time is divided by)."""
    timed: list[tuple[float, float]] = []  # (start, latency)
    errors = collections.Counter()
    stop_at = 0.0

    async def client(s: aiohttp.ClientSession) -> None:
        while (start := perf()) < stop_at:
            try:
                timed.append((start, await complete_once(s, target, shape)))
            except Exception as exc:  # noqa: BLE001 (counted and reported, the loop goes on)
                errors[str(exc)[:120]] += 1

    async with client_session(clients + 10) as s:
        await asyncio.gather(*(complete_once(s, target, shape) for _ in range(min(clients, 20))))
        begin = perf()
        window = begin + WARM_UP_S
        stop_at = window + seconds
        await asyncio.gather(*(client(s) for _ in range(clients)))
    latencies = [latency for start, latency in timed if start >= window]
    return {"clients": clients, "seconds": seconds, "warm_up_s": WARM_UP_S, "runs": len(latencies),
            "runs_all": len(timed), "runs_per_s": len(latencies) / seconds,
            "p50_ms": pct(latencies, 50) * 1000, "p99_ms": pct(latencies, 99) * 1000, "errors": dict(errors)}


async def many_sessions(target: Target, shape: str, total: int, concurrency: int) -> int:
    done = 0

    async def client(s: aiohttp.ClientSession) -> None:
        nonlocal done
        while done < total:
            done += 1
            await complete_once(s, target, shape)

    async with client_session(concurrency + 10) as s:
        await asyncio.gather(*(client(s) for _ in range(concurrency)))
    return done


# ---- the stack ------------------------------------------------------------------------------------------

def canvas(*nodes: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """A chain: nodes in order, each (id, component name, params)."""
    ids = [n[0] for n in nodes]
    return {"components": {cid: {"obj": {"component_name": name, "params": params},
                                 "downstream": ids[i + 1:i + 2], "upstream": ids[i - 1:i] if i else []}
                           for i, (cid, name, params) in enumerate(nodes)}}


def llm(model: str) -> dict[str, Any]:
    return {"llm_id": model, "sys_prompt": "Answer.", "prompts": [{"role": "user", "content": "{sys.query}"}]}


def streaming_canvas(model: str) -> dict[str, Any]:
    return canvas(("begin", "Begin", {}), ("LLM:a", "LLM", llm(model)),
                  ("Message:m", "Message", {"content": ["{LLM:a@content}"]}))


NO_MODEL = canvas(("begin", "Begin", {}),
                  ("StringTransform:a", "StringTransform", {"method": "merge", "script": "You said: {sys.query}"}),
                  ("Message:m", "Message", {"content": ["{StringTransform:a@result}"]}))
ONE_LLM = canvas(("begin", "Begin", {}),
                 ("StringTransform:a", "StringTransform", {"method": "merge", "script": "Q: {sys.query}"}),
                 ("LLM:a", "LLM", {"llm_id": "bench-20-0", "sys_prompt": "Answer.",
                                   "prompts": [{"role": "user", "content": "{StringTransform:a@result}"}]}),
                 ("StringTransform:b", "StringTransform", {"method": "merge", "script": "A: {LLM:a@content}"}),
                 ("Message:m", "Message", {"content": ["{StringTransform:b@result}"]}))


class Stack:
    def __init__(self, model_url: str, data_dir: Path) -> None:
        self.ports = {k: free_port() for k in ("HTTP", "ORCHESTRATOR", "LLM_GATEWAY", "RETRIEVAL", "SANDBOX", "REDIS")}
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
        env.update({f"TRELLIS_{k}_PORT": str(p) for k, p in self.ports.items()})
        env.update({f"TRELLIS_{k}_METRICS_PORT": "0" for k in ("ORCHESTRATOR", "LLM_GATEWAY", "RETRIEVAL", "SANDBOX")})
        env.update({"TRELLIS_DATA_DIR": str(data_dir), "TRELLIS_LLM_LOCAL": "0", "TRELLIS_API_KEYS": f"{KEY}:bench",
                    "OPENAI_BASE_URL": model_url + "/v1", "OPENAI_API_KEY": "bench",
                    "TRELLIS_SANDBOX_ALLOW_UNSANDBOXED": "1"})
        # The speed policies (docs/speed-policies.md) pass through, so their presets can be compared.
        for name in ("TRELLIS_ORCHESTRATOR_REPLICAS", "TRELLIS_GATEWAY_REPLICAS", "TRELLIS_LLM_STREAM_PACING",
                     "TRELLIS_JOURNAL_POLICY", "TRELLIS_GC_POLICY", "TRELLIS_ALLOCATOR"):
            if name in os.environ:
                env[name] = os.environ[name]
        self.env = env
        self.root = ROOT  # the checkout `trellis up` runs from (bench/side_by_side.py runs two)
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.ports['HTTP']}"

    def start(self) -> None:
        self.proc = subprocess.Popen([PY, "-m", "trellis_cli", "up"], env=self.env, cwd=self.root,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"pipeline bench: trellis up exited: {self.proc.stdout.read()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("pipeline bench: the stack did not become healthy")
            time.sleep(0.3)

    def children(self) -> dict[str, psutil.Process]:
        """Part name -> process: redis, orchestrator, orchestrator-1, llm_gateway, ..., gateway."""
        out = {}
        counts: collections.Counter = collections.Counter()
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            cmd = " ".join(child.cmdline())
            name = ("redis" if "redis-server" in cmd else
                    next((s for s in ("orchestrator", "llm_gateway", "retrieval", "sandbox") if f"services.{s}" in cmd),
                         "gateway" if "-m gateway" in cmd else ""))
            if not name:
                continue
            label = name if counts[name] == 0 else f"{name}-{counts[name]}"
            counts[name] += 1
            out[label] = child
        return out

    def rss_mb(self) -> dict[str, float]:
        return {name: round(p.memory_info().rss / 2**20, 1) for name, p in self.children().items()}

    def cpu_s(self) -> dict[str, float]:
        out = {}
        for name, p in self.children().items():
            t = p.cpu_times()
            out[name] = t.user + t.system
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


async def create_agent(url: str, dsl: dict[str, Any]) -> str:
    async with aiohttp.ClientSession() as s:
        # Released, as agents in production are: the OpenAI route runs an agent's latest published version.
        async with s.post(url + "/api/v1/agents", headers=AUTH,
                          json={"title": f"bench {time.monotonic_ns()}", "dsl": dsl, "release": True}) as r:
            body = await r.json()
    if body.get("code") != 0:
        raise SystemExit(f"pipeline bench: cannot create an agent: {body}")
    return body["data"]["id"]


def redis_commands(port: int) -> dict[str, int]:
    import redis

    stats = redis.Redis(port=port).info("commandstats")
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}


async def redis_round_trips_per_run(redis_port: int, runs: int) -> dict[str, Any]:
    """One orchestrator in this process on the stack's Redis: round trips (one per packed send: a pipeline is
    one) and commands per Run of the no-model canvas that creates its session, the gateway's one call per OpenAI
    request without a session."""
    from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

    from services.common.config import ServerConfig
    from services.orchestrator.api.canvas import CanvasServicer
    from services.orchestrator.api.sessions import SessionServicer
    from services.orchestrator.app import build
    from services.orchestrator.config import OrchestratorConfig
    from services.orchestrator.engine.settings import EngineSettings
    from services.orchestrator.store import AgentStore
    from services.orchestrator.store._redis_fast import Connection, SharedConnection  # the orchestrator's classes

    nowhere = f"127.0.0.1:{free_port()}"
    orch = build(OrchestratorConfig(server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0),
                                    engine=EngineSettings(), redis_url=f"redis://127.0.0.1:{redis_port}/0",
                                    llm_gateway_addr=nowhere, retrieval_addr=nowhere, sandbox_addr=nowhere))
    for hook in orch.on_startup:
        await hook()
    canvas_svc = next(b.servicer for b in orch.bindings if isinstance(b.servicer, CanvasServicer))
    session_svc = next(b.servicer for b in orch.bindings if isinstance(b.servicer, SessionServicer))
    agents: AgentStore = session_svc.agents
    agent = await agents.create("bench-rt", title=f"rt {time.monotonic_ns()}", dsl_json=json.dumps(NO_MODEL))
    await agents.publish("bench-rt", agent.id)  # as create_agent's: the run resolves the latest published version
    sends = collections.Counter()
    original, original_shared = Connection.send_packed_command, SharedConnection.round_trip

    async def counted(self, command, check_health=True):  # a single command, on a pooled connection
        sends["round_trips"] += 1
        sends[_caller()] += 1
        return await original(self, command, check_health)

    async def counted_shared(self, commands):  # a pipeline, on the shared connection
        sends["round_trips"] += 1
        sends[_caller()] += 1
        return await original_shared(self, commands)

    async def one_run() -> None:
        req = canvas_pb.RunRequest(tenant_id="bench-rt", query="hi", create_session=True,
                                   agent=canvas_pb.AgentTarget(agent_id=agent.id))
        async for _ in canvas_svc.Run(req, None):
            pass
        await asyncio.sleep(0)

    for _ in range(5):
        await one_run()  # warm: the plan cache, connections
    await asyncio.sleep(0.2)
    before = redis_commands(redis_port)
    Connection.send_packed_command = counted  # type: ignore[method-assign]
    SharedConnection.round_trip = counted_shared  # type: ignore[method-assign]
    try:
        for _ in range(runs):
            await one_run()
        await asyncio.sleep(0.5)  # turns persist after the stream ends
    finally:
        Connection.send_packed_command = original  # type: ignore[method-assign]
        SharedConnection.round_trip = original_shared  # type: ignore[method-assign]
    after = redis_commands(redis_port)
    assert sends["round_trips"], "no round trip counted: the orchestrator's Redis classes are not the ones patched"
    for hook in orch.on_shutdown:
        await hook()
    commands = {k: round((after.get(k, 0) - before.get(k, 0)) / runs, 2) for k in after
                if after.get(k, 0) - before.get(k, 0) > 0 and k not in ("info", "ping")}
    by_caller = {k: round(v / runs, 2) for k, v in sends.most_common() if k != "round_trips"}
    return {"runs": runs, "round_trips_per_run": round(sends["round_trips"] / runs, 2),
            "round_trips_per_run_by_caller": by_caller,
            "commands_per_run": dict(sorted(commands.items(), key=lambda kv: -kv[1])),
            "commands_total_per_run": round(sum(commands.values()), 2)}


async def run_path_floor(stack: Stack, round_trips: int, seconds: float) -> dict[str, Any]:
    """The same closed loop against the run path's floor (bench/run_floor.py): a bare aiohttp handler making
    one grpc.aio server-streaming call to a bare grpc.aio server that makes the pipeline's number of Redis round
    trips (on the stack's Redis) and streams 3 events back; runs/s, p50/p99 and CPU ms per request per process."""
    http_port, grpc_port = free_port(), free_port()
    procs = {"floor_grpc": subprocess.Popen([PY, str(HERE / "run_floor.py"), "grpc", "--port", str(grpc_port),
                                             "--redis-port", str(stack.ports["REDIS"])]),
             "floor_http": subprocess.Popen([PY, str(HERE / "run_floor.py"), "http", "--port", str(http_port),
                                             "--upstream", f"127.0.0.1:{grpc_port}"])}
    try:
        for port in (grpc_port, http_port):
            wait_port(port)
        watched = {**{k: psutil.Process(p.pid) for k, p in procs.items()}, "redis": stack.children()["redis"]}

        def cpu() -> dict[str, float]:
            return {k: sum(p.cpu_times()[:2]) for k, p in watched.items()}

        target = Target(f"http://127.0.0.1:{http_port}/v1/chat/completions", {}, {"floor": f"rt-{round_trips}"})
        before = cpu()
        result = await closed_loop(target, "floor", 100, seconds)
        after = cpu()
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(10)
    result["redis_round_trips"] = round_trips
    result["cpu_ms_per_run"] = {k: round(1000 * (after[k] - before[k]) / max(result["runs_all"], 1), 2) for k in after}
    return result


def _caller() -> str:
    """The innermost orchestrator function (store or run code) on the stack: who made this Redis round trip."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if "/services/orchestrator/" in path and not path.endswith("/redis_client.py") and "/_redis_fast/" not in path:
            return f"{path.rsplit('/services/orchestrator/', 1)[1]}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "other"


def profile(processes: dict[str, psutil.Process], seconds: float, out_dir: Path) -> dict[str, Any]:
    """py-spy (sampling, the process is not paused) of each process at once: the top functions by own time
    and by inclusive time."""
    spy = Path(PY).with_name("py-spy")
    if not spy.exists():
        return {"skipped": "py-spy is not installed (pip install -e '.[bench]')"}
    running = {}
    for name, proc in processes.items():
        raw = out_dir / f"pipeline_profile_{name}.txt"
        running[name] = (raw, subprocess.Popen(
            [str(spy), "record", "--nonblocking", "-r", "250", "-d", str(int(seconds)), "-f", "raw", "-o", str(raw),
             "-p", str(proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    summary = {}
    for name, (raw, spy_proc) in running.items():
        spy_proc.wait(seconds + 60)
        own: collections.Counter = collections.Counter()
        inclusive: collections.Counter = collections.Counter()
        total = 0
        if raw.exists():
            for line in raw.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not count.isdigit():
                    continue
                n = int(count)
                frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                          if " (" in f else f for f in stack.split(";")]
                total += n
                own[frames[-1]] += n
                for f in set(frames):
                    inclusive[f] += n
            raw.unlink()
        summary[name] = {"samples": total,
                         "own": [[f, round(100 * c / total, 1)] for f, c in own.most_common(15)] if total else [],
                         "inclusive": [[f, round(100 * c / total, 1)] for f, c in inclusive.most_common(25)] if total else []}
    return summary


# ---- the run --------------------------------------------------------------------------------------------

async def streams_a_to_d(results: dict[str, Any], direct: Target, relay: Target, chain: Target, bare: Target,
                         piped: Target, grpc_port: int, long_tokens: int, q: bool,
                         stack_cpu: Callable[[], dict[str, float]], stack_procs: dict[str, psutil.Process],
                         bare_procs: dict[str, psutil.Process]) -> None:
    print("(a) one long stream", flush=True)
    results["direct"]["a_one_stream"] = await one_long_stream(direct, long_tokens)
    results["floors"]["a_aiohttp_relay"] = await one_long_stream(relay, long_tokens)
    results["floors"]["a_grpc_stream_tokens_per_s"] = await stream_floors.grpc_tokens_per_s(grpc_port, 20000)
    results["pipeline"]["a_one_stream"] = await one_long_stream(piped, long_tokens)

    print("(b) time to first token, idle", flush=True)
    n = 30 if q else 100
    results["direct"]["b_ttft"] = await idle_ttft(direct, n)
    results["floors"]["b_ttft_aiohttp_relay"] = await idle_ttft(relay, n)
    results["floors"]["b_ttft_relay_chain"] = await idle_ttft(chain, n)
    results["floors"]["b_ttft_bare_pipeline"] = await idle_ttft(bare, n)
    # One gRPC hop alone: how much of a first message an idle process costs (three threads wake in turn on each
    # side: grpc's event engine, its completion-queue poller, the asyncio loop).
    for name, gap in (("b_grpc_hop_idle", 0.01), ("b_grpc_hop_busy", 0.0)):
        times = await stream_floors.grpc_first_message_ms(grpc_port, n, gap)
        results["floors"][name] = {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99), "n": n, "gap_s": gap}
    results["pipeline"]["b_ttft"] = await idle_ttft(piped, n)
    results["pipeline"]["b_ttft"]["overhead_p50_ms"] = results["pipeline"]["b_ttft"]["p50_ms"] - results["direct"]["b_ttft"]["p50_ms"]
    results["pipeline"]["b_ttft"]["overhead_p99_ms"] = results["pipeline"]["b_ttft"]["p99_ms"] - results["direct"]["b_ttft"]["p99_ms"]

    print("(c) 100 paced streams", flush=True)
    results["direct"]["c_paced"] = await concurrent_streams(direct, 100, "bench-200-10", 200)
    results["floors"]["c_paced_relay_chain"] = await concurrent_streams(chain, 100, "bench-200-10", 200)
    results["floors"]["c_paced_bare_pipeline"] = await concurrent_streams(bare, 100, "bench-200-10", 200, bare_procs)
    cpu0 = stack_cpu()
    results["pipeline"]["c_paced"] = await concurrent_streams(piped, 100, "bench-200-10", 200, stack_procs)
    cpu1 = stack_cpu()
    results["cpu_ms_per_stream_c"] = {k: round(10 * (cpu1[k] - cpu0.get(k, 0)), 2) for k in cpu1}  # 1000 ms / 100
    # One burst's first-token p99 moves by 2x with the machine's other load: the pipeline and the bare pipeline
    # in alternating rounds, each compared with the round beside it.
    rounds: dict[str, list[float]] = {"bare_pipeline": [], "pipeline": []}
    for _ in range(C_ROUNDS_QUICK if q else C_ROUNDS):
        for name, target in (("bare_pipeline", bare), ("pipeline", piped)):
            await asyncio.sleep(1.0)  # the previous burst's streams have ended and their runs are stored
            rounds[name].append((await concurrent_streams(target, 100, "bench-200-10", 200))["first_token_p99_ms"])
    results["c_first_token_p99_rounds_ms"] = rounds

    print("(d) 100 unpaced streams", flush=True)
    results["direct"]["d_unpaced"] = await concurrent_streams(direct, 100, "bench-300-0", 300)
    results["floors"]["d_unpaced_aiohttp_relay"] = await concurrent_streams(relay, 100, "bench-300-0", 300)
    results["pipeline"]["d_unpaced"] = await concurrent_streams(piped, 100, "bench-300-0", 300)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    # The load average says how much of the machine the run had: on a shared machine every figure moves with it.
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                                           "load_average_at_start": os.getloadavg()},
                               "direct": {}, "pipeline": {}, "floors": {}}
    tmp = Path(tempfile.mkdtemp(prefix="trellis-bench-"))
    model_port, relay_port, grpc_port = free_port(), free_port(), free_port()
    chain_ports = [free_port(), free_port()]  # two more relays after `relay_port`: three Python hops per token
    bare_ports = [free_port(), free_port(), free_port()]  # llm_gateway, orchestrator, gateway with only the hops
    model_url = f"http://127.0.0.1:{model_port}"
    bare_relays = {  # the bare pipeline, each relay in the place of the process it is named after
        "llm_relay": subprocess.Popen([PY, str(HERE / "stream_floors.py"), "grpc-relay", "--port", str(bare_ports[0]),
                                       "--upstream", model_url]),
        "orchestrator_relay": subprocess.Popen([PY, str(HERE / "stream_floors.py"), "grpc-relay", "--port",
                                                str(bare_ports[1]), "--upstream", f"127.0.0.1:{bare_ports[0]}"]),
        "gateway_relay": subprocess.Popen([PY, str(HERE / "stream_floors.py"), "http-grpc", "--port", str(bare_ports[2]),
                                           "--upstream", f"127.0.0.1:{bare_ports[1]}"])}
    helpers = [subprocess.Popen([PY, str(HERE / "model_server.py"), "--port", str(model_port)]),
               subprocess.Popen([PY, str(HERE / "stream_floors.py"), "relay", "--port", str(relay_port),
                                 "--upstream", model_url]),
               *(subprocess.Popen([PY, str(HERE / "stream_floors.py"), "relay", "--port", str(port),
                                   "--upstream", f"http://127.0.0.1:{upstream}"])
                 for port, upstream in zip(chain_ports, [relay_port, *chain_ports])),
               *bare_relays.values(),
               subprocess.Popen([PY, str(HERE / "stream_floors.py"), "grpc", "--port", str(grpc_port)])]
    stack = Stack(model_url, tmp / "data")
    try:
        for port in (model_port, relay_port, *chain_ports, *bare_ports, grpc_port):
            wait_port(port)
        stack.start()
        results["machine"]["processes"] = sorted(stack.children())
        long_tokens = 1000 if q else 4000
        shapes = {"bench-50-0", "bench-5-0", f"bench-{long_tokens}-0", "bench-200-10", "bench-300-0"}
        agents = {shape: await create_agent(stack.url, streaming_canvas(shape)) for shape in sorted(shapes)}
        agents["no_model"] = await create_agent(stack.url, NO_MODEL)
        agents["one_llm"] = await create_agent(stack.url, ONE_LLM)
        direct = Target(model_url + "/v1/chat/completions", {}, {})
        relay = Target(f"http://127.0.0.1:{relay_port}/v1/chat/completions", {}, {})
        chain = Target(f"http://127.0.0.1:{chain_ports[-1]}/v1/chat/completions", {}, {})
        bare = Target(f"http://127.0.0.1:{bare_ports[-1]}/v1/chat/completions", {}, {})
        piped = Target(stack.url + "/v1/chat/completions", AUTH, agents)
        await asyncio.sleep(1)
        results["rss_mb_idle"] = stack.rss_mb()

        if not args.only_e:
            bare_procs = {name: psutil.Process(proc.pid) for name, proc in bare_relays.items()}
            stack_procs = {k: v for k, v in stack.children().items() if k in ("gateway", "orchestrator", "llm_gateway", "redis")}
            await streams_a_to_d(results, direct, relay, chain, bare, piped, grpc_port, long_tokens, q, stack.cpu_s,
                                 stack_procs, bare_procs)

        seconds = 5 if q else 15
        print("(e) closed loops", flush=True)
        results["direct"]["e_model_closed_loop"] = await closed_loop(direct, "bench-20-0", 100, seconds)
        cpu0 = stack.cpu_s()
        results["pipeline"]["e_no_model"] = await closed_loop(piped, "no_model", 100, seconds)
        cpu1 = stack.cpu_s()
        results["pipeline"]["e_one_llm"] = await closed_loop(piped, "one_llm", 100, seconds)
        cpu2 = stack.cpu_s()
        runs_a, runs_b = results["pipeline"]["e_no_model"]["runs_all"], results["pipeline"]["e_one_llm"]["runs_all"]
        results["cpu_ms_per_run"] = {
            "no_model": {k: round(1000 * (cpu1[k] - cpu0.get(k, 0)) / max(runs_a, 1), 2) for k in cpu1},
            "one_llm": {k: round(1000 * (cpu2[k] - cpu1.get(k, 0)) / max(runs_b, 1), 2) for k in cpu2}}

        print("redis round trips per run", flush=True)
        results["redis_per_run"] = await redis_round_trips_per_run(stack.ports["REDIS"], 50 if q else 200)

        print("(e) floor of the run path", flush=True)
        round_trips = round(results["redis_per_run"]["round_trips_per_run"])
        results["floors"]["e_run_path"] = await run_path_floor(stack, round_trips, seconds)

        if not args.no_profile:
            print("profiles under the closed loop", flush=True)
            children = {k: v for k, v in stack.children().items() if k.startswith(("orchestrator", "gateway", "llm_gateway"))}
            loop_task = asyncio.create_task(closed_loop(piped, args.profile_canvas, 100, 10))
            await asyncio.sleep(1)
            results[f"profiles_{args.profile_canvas}"] = await asyncio.to_thread(profile, children, 7, HERE / "results")
            profiled_runs = (await loop_task)["runs_all"]
        else:
            profiled_runs = 0

        if args.only_e:
            results["machine"]["load_average_at_end"] = os.getloadavg()
            return results
        print("(f) sessions", flush=True)
        done = runs_a + runs_b + profiled_runs  # every closed-loop request was a one-turn session
        target = 2000 if q else 10000
        extra = max(0, target - done)
        if extra:
            await many_sessions(piped, "no_model", extra, 50)
        await asyncio.sleep(2)
        results["sessions_created"] = done + extra
        results["rss_mb_after_sessions"] = stack.rss_mb()
        results["machine"]["load_average_at_end"] = os.getloadavg()
    finally:
        stack.stop()
        for h in helpers:
            h.terminate()
            h.wait(10)
    return results


def summarize_e(r: dict[str, Any]) -> dict[str, Any]:
    """(e) beside its floor, CPU per run of each process, Redis per run, and the load the machine had."""
    d, p, f = r["direct"], r["pipeline"], r["floors"]
    return {
        "e_closed_loop_100": {"no_model_runs_per_s": round(p["e_no_model"]["runs_per_s"]),
                              "no_model_p50_ms": round(p["e_no_model"]["p50_ms"]), "no_model_p99_ms": round(p["e_no_model"]["p99_ms"]),
                              "one_llm_runs_per_s": round(p["e_one_llm"]["runs_per_s"]),
                              "one_llm_p50_ms": round(p["e_one_llm"]["p50_ms"]), "one_llm_p99_ms": round(p["e_one_llm"]["p99_ms"]),
                              "direct_model_req_per_s": round(d["e_model_closed_loop"]["runs_per_s"]),
                              "direct_model_p99_ms": round(d["e_model_closed_loop"]["p99_ms"]),
                              "floor_runs_per_s": round(f["e_run_path"]["runs_per_s"]),
                              "floor_p50_ms": round(f["e_run_path"]["p50_ms"]), "floor_p99_ms": round(f["e_run_path"]["p99_ms"]),
                              "no_model_share_of_floor": round(p["e_no_model"]["runs_per_s"] / f["e_run_path"]["runs_per_s"], 2),
                              "errors": {**p["e_no_model"]["errors"], **p["e_one_llm"]["errors"], **f["e_run_path"]["errors"]}},
        "cpu_ms_per_run": {**r["cpu_ms_per_run"], "floor": f["e_run_path"]["cpu_ms_per_run"],
                           "totals": {k: round(sum(v.values()), 2) for k, v in
                                      (*r["cpu_ms_per_run"].items(), ("floor", f["e_run_path"]["cpu_ms_per_run"]))}},
        "redis_per_run": {k: r["redis_per_run"][k] for k in ("round_trips_per_run", "commands_total_per_run")},
        "load_average": [r["machine"]["load_average_at_start"][0], r["machine"]["load_average_at_end"][0]],
    }


def first_token_rounds(rounds: dict[str, list[float]]) -> dict[str, Any]:
    """(c)'s first-token p99 in alternating rounds: each side's median, and in how many rounds each is at most 150 ms."""
    pipe, bare = rounds["pipeline"], rounds["bare_pipeline"]
    return {"rounds_pipeline_first_token_p99_ms": [round(x, 1) for x in pipe],
            "rounds_bare_pipeline_first_token_p99_ms": [round(x, 1) for x in bare],
            "rounds_pipeline_first_token_p99_median_ms": round(statistics.median(pipe), 1),
            "rounds_bare_pipeline_first_token_p99_median_ms": round(statistics.median(bare), 1),
            "rounds_pipeline_minus_bare_median_ms": round(statistics.median(p - b for p, b in zip(pipe, bare)), 1),
            "rounds_at_most_150_ms": {"pipeline": sum(x <= 150 for x in pipe), "bare_pipeline": sum(x <= 150 for x in bare),
                                      "of": len(pipe)}}


def summarize(r: dict[str, Any]) -> dict[str, Any]:
    d, p, f = r["direct"], r["pipeline"], r["floors"]
    return {
        "a_tokens_per_s": {"pipeline": round(p["a_one_stream"]["tokens_per_s"]),
                           "pipeline_slowest": round(p["a_one_stream"]["tokens_per_s_min"]),
                           "direct": round(d["a_one_stream"]["tokens_per_s"]),
                           "aiohttp_relay_floor": round(f["a_aiohttp_relay"]["tokens_per_s"]),
                           "grpc_stream_floor": round(f["a_grpc_stream_tokens_per_s"])},
        "b_ttft_ms": {"pipeline_p50": round(p["b_ttft"]["p50_ms"], 2), "pipeline_p99": round(p["b_ttft"]["p99_ms"], 2),
                      "direct_p50": round(d["b_ttft"]["p50_ms"], 2), "direct_p99": round(d["b_ttft"]["p99_ms"], 2),
                      "overhead_p50": round(p["b_ttft"]["overhead_p50_ms"], 2),
                      "relay_floor_p50": round(f["b_ttft_aiohttp_relay"]["p50_ms"], 2),
                      "relay_chain_floor_p50": round(f["b_ttft_relay_chain"]["p50_ms"], 2),
                      "relay_chain_floor_overhead_p50": round(f["b_ttft_relay_chain"]["p50_ms"] - d["b_ttft"]["p50_ms"], 2),
                      "bare_pipeline_floor_overhead_p50": round(f["b_ttft_bare_pipeline"]["p50_ms"] - d["b_ttft"]["p50_ms"], 2),
                      "grpc_hop_idle_floor_p50": round(f["b_grpc_hop_idle"]["p50_ms"], 2),
                      "grpc_hop_busy_floor_p50": round(f["b_grpc_hop_busy"]["p50_ms"], 2)},
        "c_paced_100": {"pipeline_stream_p99_s": round(p["c_paced"]["stream_p99_s"], 3),
                        "direct_stream_p99_s": round(d["c_paced"]["stream_p99_s"], 3),
                        "ratio": round(p["c_paced"]["stream_p99_s"] / d["c_paced"]["stream_p99_s"], 2),
                        "pipeline_first_token_p99_ms": round(p["c_paced"]["first_token_p99_ms"], 1),
                        "direct_first_token_p99_ms": round(d["c_paced"]["first_token_p99_ms"], 1),
                        "relay_chain_floor_stream_p99_s": round(f["c_paced_relay_chain"]["stream_p99_s"], 3),
                        "relay_chain_floor_ratio": round(f["c_paced_relay_chain"]["stream_p99_s"] / d["c_paced"]["stream_p99_s"], 2),
                        "relay_chain_floor_first_token_p99_ms": round(f["c_paced_relay_chain"]["first_token_p99_ms"], 1),
                        "bare_pipeline_floor_ratio": round(f["c_paced_bare_pipeline"]["stream_p99_s"] / d["c_paced"]["stream_p99_s"], 2),
                        "bare_pipeline_floor_first_token_p99_ms": round(f["c_paced_bare_pipeline"]["first_token_p99_ms"], 1),
                        # SSE events a stream of 200 tokens arrived in: the direct path and the bare floor send one
                        # per token; the pipeline merges what arrives while a stream lingers (docs/streaming.md)
                        "pipeline_events_per_stream": round(p["c_paced"]["events_per_stream"], 1),
                        "bare_pipeline_floor_events_per_stream": round(f["c_paced_bare_pipeline"]["events_per_stream"], 1),
                        "pipeline_cpu_ms_per_stream": r["cpu_ms_per_stream_c"],
                        # from the 100 starts to the last first token: the process that limits that p99
                        "pipeline_cpu_ms_until_last_first_token": p["c_paced"]["cpu_ms_until_last_first_token"],
                        "bare_pipeline_floor_cpu_ms_until_last_first_token":
                            f["c_paced_bare_pipeline"]["cpu_ms_until_last_first_token"],
                        **first_token_rounds(r["c_first_token_p99_rounds_ms"])},
        "d_aggregate_tokens_per_s": {"pipeline": round(p["d_unpaced"]["aggregate_tokens_per_s"]),
                                     "direct": round(d["d_unpaced"]["aggregate_tokens_per_s"]),
                                     "aiohttp_relay_floor": round(f["d_unpaced_aiohttp_relay"]["aggregate_tokens_per_s"])},
        **summarize_e(r),
        "f_rss_mb": {"idle": r["rss_mb_idle"], "after_sessions": r["rss_mb_after_sessions"], "sessions": r["sessions_created"]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller loads, for a try while developing")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profiles")
    parser.add_argument("--profile-canvas", choices=("one_llm", "no_model"), default="one_llm",
                        help="the canvas the closed loop runs while the processes are profiled")
    parser.add_argument("--only-e", action="store_true",
                        help="only the closed loops (e), their floor and CPU per run (writes pipeline_e.json)")
    args = parser.parse_args()
    results = asyncio.run(measure(args))
    results["summary"] = summarize_e(results) if args.only_e else summarize(results)
    out = HERE / "results" / ("pipeline_quick.json" if args.quick else "pipeline_e.json" if args.only_e else "pipeline.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results["summary"], indent=2))
    print(f"written: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
