"""A real redis-server for the tests, on a free port with AOF in a temporary directory."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from tests.support.net import free_port


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
        self.port = free_port()
        while cluster and self.port + 10000 > 65535:
            self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"] if self.cluster else []
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", "", *cluster, *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        else:
            raise RuntimeError("redis-server did not start")
        if self.cluster:
            self._serve_every_slot(client)

    @staticmethod
    def _serve_every_slot(client: redis.Redis) -> None:
        if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
            try:
                client.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
            except redis.ResponseError as exc:  # slots kept in nodes.conf across a restart
                if "busy" not in str(exc).lower():
                    raise
        for _ in range(500):
            if b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO"):
                return
            time.sleep(0.02)
        raise RuntimeError("redis-server in cluster mode did not reach cluster_state:ok")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()
