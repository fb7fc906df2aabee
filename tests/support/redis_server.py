"""A real redis-server for the tests, on a free port with AOF in a temporary directory."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from tests.support.net import free_port


class RedisServer:
    """A real redis-server (the same binary `trellis up` uses) with AOF, restartable to test durability."""

    def __init__(self, workdir: Path) -> None:
        from trellis_cli.stack import redis_binary

        self.binary = redis_binary()
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()
