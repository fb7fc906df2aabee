"""The Redis the chaos suite runs the stack on: one primary with AOF, and for the failover fault a replica and
a Sentinel watching them, all the same `redis-server` binary `trellis up` starts (trellis_cli/stack.py).

The orchestrators never see these addresses: each reaches Redis through a TCP proxy of the suite
(chaos/stack.py), whose upstream follows the primary Sentinel names, as a managed Redis's endpoint follows its
failovers. `primary()` is that address.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from trellis_cli.stack import redis_binary

SENTINEL_NAME = "chaos"
DOWN_AFTER_MS = 3000  # longer than a restart of the primary takes: only the failover fault fails it over


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"chaos: {what} not within {timeout:g} s")
        time.sleep(0.1)


class RedisNode:
    """One redis-server process on a fixed port, killed and started again on that port."""

    def __init__(self, workdir: Path, name: str, *config: str, sentinel: bool = False) -> None:
        self.workdir = workdir / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port = _free_port()
        self.args = config  # more lines of its configuration file
        self.sentinel = sentinel
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, socket_connect_timeout=2)

    def start(self) -> None:
        # From a file, written once: Sentinel rewrites it when it changes the node's role (a promoted replica
        # loses its `replicaof`, a failed primary that comes back gains one), so a restart keeps the role.
        conf = self.workdir / ("sentinel.conf" if self.sentinel else "redis.conf")
        if not conf.exists():
            common = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.workdir}"]
            data = [] if self.sentinel else ["appendonly yes", "appendfsync everysec", 'save ""']
            conf.write_text("\n".join(common + data + list(self.args)) + "\n")
        argv = [redis_binary(), str(conf), *(["--sentinel"] if self.sentinel else [])]
        log = open(self.workdir / "redis.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        _wait(lambda: self.client().ping(), f"redis {self.name} on :{self.port}")

    def kill(self) -> None:
        if self.pid:
            self.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            self.proc.wait(10)  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.pid:
            self.proc.terminate()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                self.kill()


class RedisNodes:
    """A primary, and with `replicated` a replica and a Sentinel (quorum 1) that fails over to it."""

    def __init__(self, workdir: Path, *, replicated: bool) -> None:
        self.nodes = [RedisNode(workdir, "redis-a")]
        self.sentinel: RedisNode | None = None
        if replicated:
            self.nodes.append(RedisNode(workdir, "redis-b", f"replicaof 127.0.0.1 {self.nodes[0].port}"))
            self.sentinel = RedisNode(workdir, "sentinel", f"sentinel monitor {SENTINEL_NAME} 127.0.0.1 "
                                      f"{self.nodes[0].port} 1",
                                      f"sentinel down-after-milliseconds {SENTINEL_NAME} {DOWN_AFTER_MS}",
                                      f"sentinel failover-timeout {SENTINEL_NAME} 10000", sentinel=True)

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        if self.sentinel is not None:
            self.sentinel.start()
            replica = self.nodes[1].client()
            _wait(lambda: replica.info("replication").get("master_link_status") == "up", "the replica in sync")

    def primary(self) -> RedisNode:
        """The primary: Sentinel's answer when there is one (it changes with a failover)."""
        if self.sentinel is None:
            return self.nodes[0]
        host, port = self.sentinel.client().execute_command("SENTINEL", "get-master-addr-by-name", SENTINEL_NAME)
        return next(n for n in self.nodes if n.port == int(port))

    def replica(self) -> RedisNode | None:
        current = self.primary()
        return next((n for n in self.nodes if n is not current), None)

    def wait_primary_is(self, node: RedisNode, timeout: float = 60.0) -> None:
        _wait(lambda: self.primary() is node and node.client().info("replication")["role"] == "master",
              f"{node.name} promoted", timeout)

    def wait_replicating(self, node: RedisNode, timeout: float = 60.0) -> None:
        _wait(lambda: node.client().info("replication").get("master_link_status") == "up",
              f"{node.name} replicating again", timeout)

    def stop(self) -> None:
        for node in ([self.sentinel] if self.sentinel else []) + self.nodes:
            node.stop()
