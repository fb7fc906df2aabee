"""End to end: `trellis up` on free ports reaches /healthz 200, stops on SIGTERM with no child left, and Redis
wrote its AOF. Start-up failures give one line naming the culprit and a non-zero exit."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest
import redis

from tests.support.net import free_port
from tests.support.waiting import eventually_sync

STARTUP_S = 240  # the local model loads at start-up


def _env(tmp_path: Path) -> tuple[dict[str, str], dict[str, int]]:
    ports = {key: free_port() for key in (
        "HTTP", "ORCHESTRATOR", "LLM_GATEWAY", "RETRIEVAL", "SANDBOX", "REDIS",
        "ORCHESTRATOR_METRICS", "LLM_GATEWAY_METRICS", "RETRIEVAL_METRICS", "SANDBOX_METRICS")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    env.update({f"TRELLIS_{key}_PORT": str(port) for key, port in ports.items()})
    env["TRELLIS_DATA_DIR"] = str(tmp_path / "data")
    return env, ports


def _start(env: dict[str, str], open_files: int | None = None) -> subprocess.Popen:
    """`open_files`: the soft limit on open files `trellis up` starts with (below the hard limit)."""

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return subprocess.Popen(
        [sys.executable, "-m", "trellis_cli", "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lower if open_files is not None else None,
    )


def _healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


SERVICES = {
    "ORCHESTRATOR": "trellis.canvas.v1.CanvasService",
    "LLM_GATEWAY": "trellis.llm.v1.LlmService",
    "RETRIEVAL": "trellis.retrieval.v1.RetrievalService",
    "SANDBOX": "trellis.sandbox.v1.SandboxService",
}


def _check_every_service_answers(ports: dict[str, int]) -> None:
    """Each gRPC process: health SERVING, its service in reflection, Prometheus text on its metrics port."""
    import asyncio

    import grpc
    from tests.support.net import health_status, reflected_services

    async def check(port: int, service: str) -> tuple[str, set[str]]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await health_status(channel, service), await reflected_services(channel)

    for key, service in SERVICES.items():
        status, names = asyncio.run(check(ports[key], service))
        assert status == "SERVING", key
        assert service in names and "grpc.health.v1.Health" in names, (key, names)
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[key + '_METRICS']}/metrics", timeout=5) as resp:
            assert resp.status == 200 and b"trellis_grpc_request_seconds" in resp.read(), key
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['HTTP']}/metrics", timeout=5) as resp:
        assert resp.status == 200 and b"trellis_http_requests_total" in resp.read()


def test_up_healthy_then_sigterm_stops_everything_and_keeps_aof(tmp_path):
    """Also: started with a soft limit on open files below the hard one, `trellis up` raises it to the hard
    limit for every part it starts (each held stream is a socket) and says so."""
    env, ports = _env(tmp_path)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    raised = hard if hard != resource.RLIM_INFINITY else int(Path("/proc/sys/fs/nr_open").read_text())
    low = min(1024, raised - 1)
    proc = _start(env, open_files=low)
    try:
        def healthy() -> bool:
            assert proc.poll() is None, f"trellis up died: {proc.stderr.read()}"
            return _healthz(ports["HTTP"]) == 200

        eventually_sync(healthy, what="the stack healthy", timeout=STARTUP_S)
        children = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        for part in ("redis-server", "services.orchestrator", "services.llm_gateway", "services.retrieval", "services.sandbox", "gateway"):
            assert part in names
        for part in psutil.Process(proc.pid).children():  # the soft limit raised, inherited from `trellis up`
            assert part.rlimit(psutil.RLIMIT_NOFILE) == (raised, hard), part.cmdline()
        for child in children:  # every Python part runs its loop on uvloop (services/common/event_loop.py)
            if "python" in os.path.basename(child.cmdline()[0]):
                assert any("uvloop" in m.path for m in child.memory_maps()), child.cmdline()
        for part in psutil.Process(proc.pid).children():  # and allocates with jemalloc (TRELLIS_ALLOCATOR)
            if "python" in os.path.basename(part.cmdline()[0]):
                assert any("libjemalloc" in m.path for m in part.memory_maps()), part.cmdline()
            else:  # Redis keeps its own (Debian's links jemalloc itself): nothing preloaded into it
                assert "LD_PRELOAD" not in part.environ(), part.cmdline()
        _check_every_service_answers(ports)
        # state written through the private Redis must land in its AOF
        aof_dir = tmp_path / "data" / "redis"

        def in_aof() -> bool:
            return any(b"trellis:e2e" in f.read_bytes() for f in aof_dir.rglob("*.aof*") if f.is_file())

        redis.Redis(port=ports["REDIS"]).set("trellis:e2e", "kept")
        eventually_sync(in_aof, what="the write in the AOF")  # written out; SIGTERM makes it durable
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "trellis is up." in out and f":{ports['HTTP']}" in out
        key = (tmp_path / "data" / "api_key").read_text().split(":")[0].strip()
        assert f"API key (tenant default): {key}" in out
        assert f"open files: {raised} per process (soft limit raised from {low} to the hard limit)" in out
        assert "allocator: jemalloc" in out
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"orphans left: {[c.pid for c in alive]}"
        assert in_aof()  # still there after the stop
    finally:
        if proc.poll() is None:
            proc.kill()


def test_busy_port_is_one_line_naming_it(tmp_path):
    env, ports = _env(tmp_path)
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", ports["RETRIEVAL"]))
        blocker.listen()
        proc = _start(env)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert str(ports["RETRIEVAL"]) in lines[0] and "retrieval" in lines[0] and "busy" in lines[0]


def test_service_dying_at_start_is_named(tmp_path):
    env, ports = _env(tmp_path)
    # The orchestrator cannot reach this Redis, so its start-up hook fails and it exits.
    env["TRELLIS_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    proc = _start(env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "orchestrator" in lines[0] and "exited during start-up" in lines[0] and "Redis" in lines[0]
    assert not [p for p in psutil.process_iter(["cmdline"]) if env["TRELLIS_DATA_DIR"] in " ".join(p.info["cmdline"] or [])]


def test_replicas_default_to_half_the_cores_and_the_setting_wins(monkeypatch, tmp_path):
    from trellis_cli import stack

    monkeypatch.setenv("TRELLIS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRELLIS_REDIS_URL", "redis://127.0.0.1:1/0")
    for name in ("TRELLIS_ORCHESTRATOR_REPLICAS", "TRELLIS_GATEWAY_REPLICAS", "TRELLIS_ORCHESTRATOR_ADDR"):
        monkeypatch.delenv(name, raising=False)

    def counts(cpus: int) -> tuple[int, int, str]:
        monkeypatch.setattr(stack.os, "cpu_count", lambda: cpus)
        monkeypatch.delenv("TRELLIS_ORCHESTRATOR_ADDR", raising=False)
        procs, env = stack.plan_stack()
        names = [p.name for p in procs]
        return (sum(n.startswith("orchestrator") for n in names), sum(n.startswith("gateway") for n in names),
                env["TRELLIS_ORCHESTRATOR_ADDR"])

    assert counts(1)[:2] == (1, 1)
    assert counts(2)[:2] == (1, 1)  # one orchestrator on two cores: the gateway, llm_gateway and Redis share them
    four = counts(4)
    assert four[:2] == (2, 2) and four[2].startswith("ipv4:") and four[2].count(",") == 1
    monkeypatch.setenv("TRELLIS_ORCHESTRATOR_REPLICAS", "3")
    assert counts(2)[0] == 3


JEMALLOC_ENV = {"LD_PRELOAD": "libjemalloc.so.2", "PYTHONMALLOC": "malloc", "MALLOC_CONF": "background_thread:true"}


def test_the_python_parts_start_with_their_allocator_and_redis_with_its_own(monkeypatch, tmp_path):
    """TRELLIS_ALLOCATOR (services/common/speed_policies.py AllocatorPolicy): jemalloc by default, in every Python
    part's environment and not in the shared one (Redis); pymalloc sets nothing. Without the library the default
    falls back to pymalloc and says why; asked for by name, it is a configuration error."""
    import ctypes.util

    from trellis_cli import stack

    monkeypatch.setenv("TRELLIS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TRELLIS_REDIS_URL", raising=False)
    monkeypatch.delenv("TRELLIS_ALLOCATOR", raising=False)
    for name in JEMALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    procs, env = stack.plan_stack()
    assert "LD_PRELOAD" not in env and "PYTHONMALLOC" not in env
    for proc in procs:
        python = proc.argv[0] == sys.executable
        assert (proc.env.get("LD_PRELOAD") == "libjemalloc.so.2") == python, proc.name
        assert (proc.env.get("PYTHONMALLOC") == "malloc") == python, proc.name
    assert stack.allocator_choice()[1] == "jemalloc"

    monkeypatch.setenv("TRELLIS_ALLOCATOR", "pymalloc")
    for name, value in JEMALLOC_ENV.items():  # inherited, as inside the image: the policy still decides
        monkeypatch.setenv(name, value)
    procs, env = stack.plan_stack()
    assert not any(name in env for name in JEMALLOC_ENV)
    assert not any("LD_PRELOAD" in p.env for p in procs)
    assert stack.allocator_choice()[1] == "pymalloc"
    for name in JEMALLOC_ENV:
        monkeypatch.delenv(name)

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # a machine without libjemalloc2
    monkeypatch.delenv("TRELLIS_ALLOCATOR")
    assert not any("LD_PRELOAD" in p.env for p in stack.plan_stack()[0])
    assert stack.allocator_choice()[1].startswith("pymalloc (libjemalloc.so.2 is not installed")
    monkeypatch.setenv("TRELLIS_ALLOCATOR", "jemalloc")
    with pytest.raises(SystemExit, match="TRELLIS_ALLOCATOR=jemalloc, but libjemalloc.so.2 is not installed"):
        stack.plan_stack()
