"""`trellis up` supervises real processes: replicas start on their own ports, a child killed with SIGKILL comes
back and answers health again (logged and counted), and one that keeps dying stops the stack."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import psutil

from tests.support.net import free_port, health_status
from tests.support.waiting import eventually_sync

STARTUP_S = 120
REPLICA_STEP = 1000  # trellis_cli/stack.py: replica i listens on port + 1000 i


def _env(tmp_path: Path) -> tuple[dict[str, str], dict[str, int]]:
    # Ports below 60000 keep port + 1000 (the second replica) a valid port.
    ports: dict[str, int] = {}
    while len(ports) < 6:
        port = free_port()
        if port < 60000 and port not in ports.values():
            ports[("HTTP", "ORCHESTRATOR", "LLM_GATEWAY", "RETRIEVAL", "SANDBOX", "REDIS")[len(ports)]] = port
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    env.update({f"TRELLIS_{key}_PORT": str(port) for key, port in ports.items()})
    env.update({f"TRELLIS_{key}_METRICS_PORT": "0" for key in ("ORCHESTRATOR", "LLM_GATEWAY", "RETRIEVAL", "SANDBOX")})
    env.update({"TRELLIS_DATA_DIR": str(tmp_path / "data"), "TRELLIS_LLM_LOCAL": "0", "TRELLIS_SANDBOX_ALLOW_UNSANDBOXED": "1",
                "TRELLIS_ORCHESTRATOR_REPLICAS": "2", "TRELLIS_GATEWAY_REPLICAS": "2",
                "TRELLIS_RESTART_MAX_EXITS": "3", "TRELLIS_RESTART_WINDOW_S": "120", "TRELLIS_RESTART_BACKOFF_S": "0.2"})
    return env, ports


def _healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def _grpc_health(port: int) -> str:
    async def check() -> str:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                return await health_status(channel, "trellis.canvas.v1.CanvasService")
            except grpc.aio.AioRpcError:
                return "DOWN"

    return asyncio.run(check())


def _listener(port: int) -> psutil.Process:
    """The process that listens on `port` (a child of trellis up)."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return psutil.Process(conn.pid)
    raise AssertionError(f"nothing listens on {port}")


def test_replicas_are_restarted_after_kill_and_a_crash_loop_stops_the_stack(tmp_path):
    env, ports = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "trellis_cli", "up"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        eventually_sync(lambda: proc.poll() is not None or _healthz(ports["HTTP"]) == 200, what="the stack",
                        timeout=STARTUP_S)
        assert proc.poll() is None, proc.stderr.read()
        children = " ".join(" ".join(c.cmdline()) for c in psutil.Process(proc.pid).children(recursive=True))
        assert children.count("services.orchestrator") == 2 and children.count("-m gateway") == 2
        second = ports["ORCHESTRATOR"] + REPLICA_STEP
        assert _grpc_health(ports["ORCHESTRATOR"]) == "SERVING" and _grpc_health(second) == "SERVING"

        for kill in range(1, 4):
            victim = _listener(second)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            if kill < 3:  # restarted with backoff: a new process answers on the same port
                eventually_sync(lambda: _grpc_health(second) == "SERVING", what=f"the replica back after kill {kill}")
                assert _listener(second).pid != victim.pid
                assert _healthz(ports["HTTP"]) == 200
        # The third exit inside the window: the stack stops, naming the part.
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 1, err
        assert "orchestrator-1 exited unexpectedly" in err and "restart #2" in (tmp_path / "data/logs/orchestrator-1.log").read_text()
        assert "orchestrator-1 exited 3 times within 120s" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
