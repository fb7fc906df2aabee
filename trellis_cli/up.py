"""`trellis up`: start the whole stack, wait until every part is healthy, keep it running (a part that exits
unexpectedly is restarted with backoff, see `RestartPolicy`), stop it cleanly on a signal.

Children get PR_SET_PDEATHSIG, so even a `kill -9` of this supervisor leaves no orphan behind. Before it starts
anything it raises its soft limit on open files to the hard limit, which every part inherits: each held stream
is a socket in the gateway and in the llm_gateway (services/common/open_files.py); its start-up output says so.
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
from collections import deque
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.auth import ensure_api_key_file
from gateway.config import API_KEY_FILE
from services.common.config import env_float, env_int
from services.common.open_files import OpenFiles, raise_soft_limit
from trellis_cli.stack import Process, allocator_choice, log_dir, plan_stack

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


class Child:
    """One started process of the stack, and what its supervision remembers about it."""

    def __init__(self, proc: Process, env: dict[str, str]) -> None:
        self.proc = proc
        self.env = {**env, **proc.env}
        self.log_path = log_dir() / f"{proc.name}.log"
        self.popen: subprocess.Popen | None = None
        self.exits: deque[float] = deque()  # monotonic times of unexpected exits inside the window
        self.restarts = 0
        self.restart_at: float | None = None

    def spawn(self) -> None:
        with open(self.log_path, "ab") as log_file:
            # Own session: a terminal's Ctrl-C reaches only this supervisor, which then stops the parts in
            # order (services drain first, Redis last) instead of all at once.
            self.popen = subprocess.Popen(
                self.proc.argv, env=self.env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=partial(_die_with_parent, os.getpid()),
            )

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()


@dataclass(frozen=True)
class RestartPolicy:
    """A child that exits unexpectedly is restarted after a backoff that doubles with each recent exit; one
    that exits `max_exits` times within `window_s` stops the stack (it will not get better by itself)."""

    max_exits: int  # TRELLIS_RESTART_MAX_EXITS
    window_s: float  # TRELLIS_RESTART_WINDOW_S
    backoff_s: float  # TRELLIS_RESTART_BACKOFF_S: the first delay
    backoff_max_s: float = 10.0

    @classmethod
    def from_env(cls) -> "RestartPolicy":
        policy = cls(env_int("TRELLIS_RESTART_MAX_EXITS", 5), env_float("TRELLIS_RESTART_WINDOW_S", 60.0),
                     env_float("TRELLIS_RESTART_BACKOFF_S", 0.5))
        if policy.max_exits < 1 or policy.window_s <= 0 or policy.backoff_s < 0:
            raise SystemExit("configuration error: TRELLIS_RESTART_MAX_EXITS must be >= 1, TRELLIS_RESTART_WINDOW_S > 0 "
                             "and TRELLIS_RESTART_BACKOFF_S >= 0")
        return policy

    def delay(self, recent_exits: int) -> float:
        return min(self.backoff_s * 2 ** (recent_exits - 1), self.backoff_max_s)


class Stack:
    def __init__(self, open_files: OpenFiles) -> None:
        self.open_files = open_files  # raised before any part starts: every part inherits it
        allocator_env, self.allocator = allocator_choice()
        self.procs, self.env = plan_stack(allocator_env)
        self.running: list[Child] = []
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
            child = Child(proc, self.env)
            child.spawn()
            self.running.append(child)
            if proc.name == "redis":  # the services need state before they can say SERVING
                self._wait([child], timeout_s)
        self._wait(self.running, timeout_s)

    def _wait(self, group: list[Child], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(group)
        while pending:
            if self.stop_requested:
                raise StartupFailed("interrupted during start-up")
            for child in list(pending):
                code = child.exit_code()
                if code is not None:
                    raise StartupFailed(f"{child.proc.name} exited during start-up (exit {code}): "
                                        f"{_last_line(child.log_path)} [log: {child.log_path}]")
                if _healthy(child.proc):
                    pending.remove(child)
            if pending and time.monotonic() > deadline:
                names = ", ".join(c.proc.name for c in pending)
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
        http = self.env["TRELLIS_HTTP_PORT"]
        for child in self.running:
            proc = child.proc
            where = ", ".join(f"{label} :{port}" for label, port in proc.ports.items()) or f"shares :{http}"
            rows.append(f"  {proc.name:<14} {where:<28} {child.log_path}")
        return "\n".join(
            ["trellis is up.", *rows, f"  HTTP API: http://127.0.0.1:{http}   health: http://127.0.0.1:{http}/healthz",
             f"  open files: {self.open_files.describe()}", f"  allocator: {self.allocator}",
             self.api_key_line(), "Ctrl-C stops everything."]
        )

    def supervise(self, policy: RestartPolicy, now: float) -> Child | None:
        """One pass: restart what is due, notice what exited. Returns a child that keeps failing, if any."""
        for child in self.running:
            if child.restart_at is not None:
                if now >= child.restart_at and not self.stop_requested:
                    child.restart_at = None
                    child.spawn()
                    _note(f"{child.proc.name} restarted (restart #{child.restarts}) [log: {child.log_path}]")
                continue
            code = child.exit_code()
            if code is None:
                continue
            child.exits.append(now)
            while child.exits and child.exits[0] < now - policy.window_s:
                child.exits.popleft()
            child.restarts += 1
            if len(child.exits) >= policy.max_exits:
                return child
            delay = policy.delay(len(child.exits))
            _note(f"{child.proc.name} exited unexpectedly (exit {code}; {len(child.exits)} in the last "
                  f"{policy.window_s:.0f}s); restarting in {delay:.1f}s: {_last_line(child.log_path)} [log: {child.log_path}]")
            with open(child.log_path, "ab") as log_file:
                log_file.write(f"--- trellis up: exited with {code}; restart #{child.restarts} in {delay:.1f}s ---\n".encode())
            child.restart_at = now + delay
        return None

    def stop(self, grace_s: float) -> None:
        """Services and gateway first (they drain), Redis last (it flushes its AOF on SIGTERM)."""
        live = [c.popen for c in self.running if c.popen is not None]
        redis = [c.popen for c in self.running if c.popen is not None and c.proc.name == "redis"]
        for group in ([p for p in live if p not in redis], redis):
            for child in group:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            for child in group:
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


def _note(line: str) -> None:
    print(f"trellis up: {line}", file=sys.stderr, flush=True)


def run_up() -> int:
    stack = Stack(raise_soft_limit())

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
    policy = RestartPolicy.from_env()
    exit_code = 0
    while not stack.stop_requested:
        failing = stack.supervise(policy, time.monotonic())
        if failing is not None:
            _note(f"{failing.proc.name} exited {policy.max_exits} times within {policy.window_s:.0f}s "
                  f"(last exit {failing.exit_code()}); stopping the stack [log: {failing.log_path}]")
            exit_code = 1
            break
        time.sleep(0.2)
    print("trellis: stopping...", flush=True)
    stack.stop(grace)
    print("trellis: stopped.", flush=True)
    return exit_code
