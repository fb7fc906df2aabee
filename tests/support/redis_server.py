"""A real redis-server for the tests, on a free port with AOF in a temporary directory."""
from __future__ import annotations

import subprocess
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.net import free_port
from tests.support.waiting import eventually_sync


class RedisServer:
    """A real redis-server (the same binary `trellis up` uses) with AOF, restartable to test durability."""

    def __init__(self, workdir: Path, *, cluster: bool = False, args: tuple[str, ...] = ()) -> None:
        from trellis_cli.stack import redis_binary

        self.binary = redis_binary()
        self.workdir = workdir
        # A Redis Cluster node serving every slot: a plain client works, and any multi-key script or MULTI whose
        # keys are in different slots fails with CROSSSLOT as on a real cluster. Its bus listens on port + 10000.
        self.cluster = cluster
        self.args = args  # more redis-server options
        self.port = self._free_port()
        self.proc: subprocess.Popen | None = None

    def _free_port(self) -> int:
        return free_port(with_offset=10000 if self.cluster else 0)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        first_start = self.proc is None
        for attempt in range(5 if first_start else 1):  # a restart keeps its port: clients hold the URL
            if attempt:  # the port was taken between choosing it and binding it (by another process's connection)
                self.port = self._free_port()
            if self._spawn():
                break
        else:
            raise RuntimeError(f"redis-server did not start (last port {self.port}; see {self.workdir}/redis.log)")
        if self.cluster:
            self._serve_every_slot(redis.Redis(port=self.port))

    def _spawn(self) -> bool:
        """Start redis-server on self.port; False if it exits before answering a PING."""
        cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"] if self.cluster else []
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", str(self.workdir / "redis.log"),
             *cluster, *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
        proc = self.proc

        def answered_or_exited() -> str:
            return "exited" if proc.poll() is not None else "up" if client.ping() else ""

        try:
            return eventually_sync(answered_or_exited, what="redis-server answering", timeout=10,
                                   ignoring=(redis.ConnectionError,)) == "up"
        except AssertionError:
            proc.kill()
            proc.wait()
            return False

    @staticmethod
    def _serve_every_slot(client: redis.Redis) -> None:
        if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
            try:
                client.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
            except redis.ResponseError as exc:  # slots kept in nodes.conf across a restart
                if "busy" not in str(exc).lower():
                    raise
        eventually_sync(lambda: b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO"),
                        what="redis-server in cluster mode at cluster_state:ok", timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()
