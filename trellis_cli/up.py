"""`trellis up`: start the whole stack, wait until every part is healthy, stop it cleanly on a signal.

Children get PR_SET_PDEATHSIG, so even a `kill -9` of this supervisor leaves no orphan behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.auth import ensure_api_key_file
from gateway.config import API_KEY_FILE
from services.common.config import env_float
from trellis_cli.stack import Process, log_dir, plan_stack

_PR_SET_PDEATHSIG = 1


class StartupFailed(Exception):
    """One line for the user: which part failed and why."""


def _die_with_parent(parent: int) -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the supervisor died before the signal was armed
        os._exit(1)


def _port_busy(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def _healthy(proc: Process) -> bool:
    if proc.grpc_port is not None:
        with grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}") as ch:
            try:
                resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            except grpc.RpcError:
                return False
            return resp.status == health_pb2.HealthCheckResponse.SERVING
    if proc.http_health is not None:
        try:
            with urllib.request.urlopen(proc.http_health, timeout=2.0) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False
    with socket.socket() as s:  # redis: accepting connections is enough
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", next(iter(proc.ports.values())))) == 0


class Stack:
    def __init__(self) -> None:
        self.procs, self.env = plan_stack()
        self.running: list[tuple[Process, subprocess.Popen, Path]] = []
        self.stop_requested = False

    def check_ports(self) -> None:
        for proc in self.procs:
            for label, port in proc.ports.items():
                if _port_busy(port):
                    raise StartupFailed(f"port {port} ({label}) is busy; set the matching TRELLIS_*_PORT to move it")

    def start(self, timeout_s: float) -> None:
        log_dir().mkdir(parents=True, exist_ok=True)
        for proc in self.procs:
            if proc.name == "redis":
                (Path(self.env["TRELLIS_DATA_DIR"]) / "redis").mkdir(parents=True, exist_ok=True)
            log_path = log_dir() / f"{proc.name}.log"
            with open(log_path, "ab") as log_file:
                # Own session: a terminal's Ctrl-C reaches only this supervisor, which then stops the parts in
                # order (services drain first, Redis last) instead of all at once.
                child = subprocess.Popen(
                    proc.argv, env={**self.env, **proc.env}, stdout=log_file, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=partial(_die_with_parent, os.getpid()),
                )
            self.running.append((proc, child, log_path))
            if proc.name == "redis":  # the services need state before they can say SERVING
                self._wait([self.running[-1]], timeout_s)
        self._wait(self.running, timeout_s)

    def _wait(self, group: list[tuple[Process, subprocess.Popen, Path]], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(group)
        while pending:
            if self.stop_requested:
                raise StartupFailed("interrupted during start-up")
            for item in list(pending):
                proc, child, log_path = item
                if child.poll() is not None:
                    raise StartupFailed(
                        f"{proc.name} exited during start-up (exit {child.returncode}): {_last_line(log_path)} [log: {log_path}]"
                    )
                if _healthy(proc):
                    pending.remove(item)
            if pending and time.monotonic() > deadline:
                names = ", ".join(p.name for p, _, _ in pending)
                raise StartupFailed(f"{names} not healthy after {timeout_s:.0f}s [logs: {log_dir()}]")
            if pending:
                time.sleep(0.1)

    def api_key_line(self) -> str:
        """The key to call the HTTP API with: configured keys are the operator's; otherwise the generated one."""
        if self.env.get("TRELLIS_API_KEYS"):
            return "  API keys: as configured in TRELLIS_API_KEYS"
        path = Path(self.env["TRELLIS_DATA_DIR"]) / API_KEY_FILE
        return f"  API key (tenant default): {ensure_api_key_file(path)}   (stored in {path})"

    def describe(self) -> str:
        rows = [f"  {'part':<14} {'listens on':<28} log"]
        for proc, child, log_path in self.running:
            where = ", ".join(f"{label} :{port}" for label, port in proc.ports.items())
            rows.append(f"  {proc.name:<14} {where:<28} {log_path}")
        http = self.env["TRELLIS_HTTP_PORT"]
        return "\n".join(
            ["trellis is up.", *rows, f"  HTTP API: http://127.0.0.1:{http}   health: http://127.0.0.1:{http}/healthz",
             self.api_key_line(), "Ctrl-C stops everything."]
        )

    def first_dead(self) -> tuple[Process, subprocess.Popen, Path] | None:
        return next((item for item in self.running if item[1].poll() is not None), None)

    def stop(self, grace_s: float) -> None:
        """Services and gateway first (they drain), Redis last (it flushes its AOF on SIGTERM)."""
        redis = [item for item in self.running if item[0].name == "redis"]
        for group in ([item for item in self.running if item[0].name != "redis"], redis):
            for _, child, _ in group:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            for _, child, _ in group:
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


def run_up() -> int:
    stack = Stack()

    def on_signal(signum, frame) -> None:
        stack.stop_requested = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    startup_timeout = env_float("TRELLIS_STARTUP_TIMEOUT_S", 300.0)
    grace = env_float("TRELLIS_GRACE_S", 10.0) + env_float("TRELLIS_DRAIN_S", 0.5) + 5.0
    try:
        stack.check_ports()
        stack.start(startup_timeout)
    except StartupFailed as exc:
        print(f"trellis up: {exc}", file=sys.stderr)
        stack.stop(grace)
        return 1
    print(stack.describe(), flush=True)
    exit_code = 0
    while not stack.stop_requested:
        dead = stack.first_dead()
        if dead:
            proc, child, log_path = dead
            print(f"trellis up: {proc.name} stopped unexpectedly (exit {child.returncode}); stopping the stack [log: {log_path}]", file=sys.stderr)
            exit_code = 1
            break
        time.sleep(0.2)
    print("trellis: stopping...", flush=True)
    stack.stop(grace)
    print("trellis: stopped.", flush=True)
    return exit_code
