"""The Redis the chaos suite runs the stack on, from the tests' fixtures (the `redis-server` `trellis up` starts):
one Redis with AOF (tests/support/redis_server.py), or for the failover fault a primary with its replica under
three Sentinels (tests/support/redis_sentinel.py). What the faults do to them is here: a node killed -9 (no
pause, no sync first: what an unplanned failure is), a node started again with the role it has now.

Orchestrators reach the primary through Sentinel (`sentinel_url`) or through a proxy of the suite whose
upstream follows `primary()` (chaos/stack.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import redis

from tests.support.redis_sentinel import RedisSentinelServers
from tests.support.redis_server import RedisServer

# As `trellis up` runs Redis (trellis_cli/stack.py); the fixture's default is `always`.
AOF = ("--appendfsync", "everysec")
# Longer than a restart of the primary takes: only the failover fault fails it over.
DOWN_AFTER_MS = 3000


class RedisNodes:
    def __init__(self, workdir: Path, *, replicated: bool) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.sentinels = RedisSentinelServers(workdir, down_after_ms=DOWN_AFTER_MS) if replicated else None
        self.nodes = self.sentinels.data if self.sentinels else [RedisServer(workdir)]
        for node in self.nodes:
            node.args = AOF

    @property
    def replicated(self) -> bool:
        return self.sentinels is not None

    @property
    def sentinel_url(self) -> str:
        assert self.sentinels is not None
        return self.sentinels.url

    def start(self) -> None:
        if self.sentinels is not None:
            self.sentinels.start()  # (it gives the replica its `--replicaof`; a restart sets both: start_again)
        else:
            self.nodes[0].start()

    def stop(self) -> None:
        if self.sentinels is not None:
            self.sentinels.stop()
        else:
            self.nodes[0].stop()

    def primary(self) -> RedisServer:
        """The primary: the one the Sentinels name (it changes with a failover)."""
        return self.sentinels.primary() if self.sentinels is not None else self.nodes[0]

    def replica(self) -> RedisServer | None:
        return self.sentinels.replica() if self.sentinels is not None else None

    def ports(self) -> list[int]:
        """Every port a Redis part listens on: the data nodes and any Sentinels."""
        sentinels = getattr(self.sentinels, "sentinels", []) if self.sentinels is not None else []
        return [n.port for n in self.nodes] + [s.port for s in sentinels]

    def name(self, node: RedisServer) -> str:
        return f"redis-{'ab'[self.nodes.index(node)]}"

    def processes(self) -> list[tuple[str, int]]:
        return [(self.name(n), n.proc.pid) for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    @staticmethod
    def kill(node: RedisServer) -> None:
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(10)

    def start_again(self, node: RedisServer) -> None:
        """A killed node back on its port, from its AOF, in the role it had: the primary as a primary (the
        fixture would start a promoted replica with its first `--replicaof`), a replica of the primary."""
        primary = self.primary() if self.sentinels is not None else node
        node.args = AOF if primary is node else (*AOF, "--replicaof", "127.0.0.1", str(primary.port))
        node.start()

    def unreplicated_bytes(self) -> int:
        """What the primary acknowledged that its replica does not have yet (replication is asynchronous)."""
        replica = self.replica()
        if replica is None:
            return 0
        primary = redis.Redis(port=self.primary().port, socket_timeout=5).info("replication")["master_repl_offset"]
        return primary - redis.Redis(port=replica.port, socket_timeout=5).info("replication").get("slave_repl_offset", 0)

    def wait_promoted(self, node: RedisServer, timeout: float = 60.0) -> None:
        """Until the Sentinels name `node` the primary."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.primary() is node:
                    return
            except (redis.RedisError, StopIteration):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"chaos: {self.name(node)} not promoted within {timeout:g} s")
            time.sleep(0.1)

    def rejoin(self, node: RedisServer) -> None:
        """A killed former primary back; the Sentinels make it the new primary's replica."""
        assert self.sentinels is not None
        self.start_again(node)
        self.sentinels.wait_settled()
