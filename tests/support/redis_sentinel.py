"""A real Redis replicated under Sentinel for the tests: a primary with one replica and three Sentinels (quorum
two) monitoring it as `trellis`, all from the redis-server `trellis up` uses, in a temporary directory; and a
primary that goes away while it serves:

- `failover`: the Sentinels hand the primary's place to its replica (SENTINEL FAILOVER), once the replica has
  everything the primary acknowledged, as a careful operator does it: writes paused on the old primary until
  it is made the new primary's replica (Sentinel demotes it only seconds after the promotion, and a write it
  took meanwhile would be lost);
- `kill_primary`: the primary killed -9, its replica elected by the Sentinels after `down-after-milliseconds`.

    sentinel = RedisSentinelServers(tmp_path)
    sentinel.start()
    sentinel.url                    # "redis+sentinel://127.0.0.1:<port>,.../trellis" (TRELLIS_REDIS_URL)
    sentinel.primary()              # the data node the Sentinels name now
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import redis

from tests.support.net import free_port
from tests.support.redis_server import RedisServer
from tests.support.waiting import eventually_sync

SERVICE = "trellis"


class SentinelServer:
    """One Sentinel (redis-server --sentinel, its config file its own: Sentinel rewrites it)."""

    def __init__(self, workdir: Path, primary_port: int, down_after_ms: int) -> None:
        from trellis_cli.stack import redis_binary

        self.workdir = workdir
        self.port = free_port()
        self.config = workdir / "sentinel.conf"
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {workdir}\nlogfile {workdir / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} 5000\n")
        self.binary = redis_binary()
        self.proc: subprocess.Popen | None = None

    @property
    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, str(self.config), "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        eventually_sync(lambda: self.client.ping(), what=f"Sentinel on {self.port}", timeout=30,
                        ignoring=(redis.ConnectionError,))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class RedisSentinelServers:
    def __init__(self, root: Path, *, sentinels: int = 3, down_after_ms: int = 1000) -> None:
        self.root = root
        self.data = [RedisServer(self._dir("primary")), RedisServer(self._dir("replica"))]
        self.down_after_ms = down_after_ms
        self.sentinel_count = sentinels
        self.sentinels: list[SentinelServer] = []

    def _dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{SERVICE}"

    def start(self) -> None:
        primary, replica = self.data
        primary.start()
        replica.args = ("--replicaof", "127.0.0.1", str(primary.port))
        replica.start()
        eventually_sync(lambda: self._in_sync(replica), what="the replica in sync", timeout=30)
        self.sentinels = [SentinelServer(self._dir(f"sentinel-{i}"), primary.port, self.down_after_ms)
                          for i in range(self.sentinel_count)]
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait_settled()

    # ------------------------------------------------------------------ who is what
    def primary(self) -> RedisServer:
        host, port = self.sentinels[0].client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return next(n for n in self.data if n.port == int(port))

    def _named_by_all(self) -> int | None:
        """The port of the primary every Sentinel names, if they agree."""
        named = {int(s.client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1])
                 for s in self.sentinels}
        return named.pop() if len(named) == 1 else None

    def replica(self) -> RedisServer:
        primary = self.primary()
        return next(n for n in self.data if n is not primary)

    @staticmethod
    def _client(node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, socket_timeout=5)

    def _role(self, node: RedisServer) -> str:
        return self._client(node).execute_command("ROLE")[0].decode()

    def _in_sync(self, node: RedisServer) -> bool:
        info = self._client(node).info("replication")
        return info.get("master_link_status") == "up" and info.get("master_sync_in_progress") == 0

    def wait_settled(self, timeout: float = 60) -> None:
        """Until every Sentinel names the same primary, knows its replica and the other Sentinels, and the
        replica (if up) is in sync."""
        def settled() -> bool:
            primary = {tuple(s.client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE))
                       for s in self.sentinels}
            if len(primary) != 1:
                return False
            node = self.primary()
            if self._role(node) != "master":
                return False
            for s in self.sentinels:
                state = s.client.sentinel_master(SERVICE)
                if state["num-slaves"] < 1 or state["num-other-sentinels"] < self.sentinel_count - 1:
                    return False
                if state["is_sdown"] or state["is_odown"]:
                    return False
            others = [n for n in self.data if n is not node and n.proc is not None and n.proc.poll() is None]
            return all(self._role(n) == "slave" and self._in_sync(n) for n in others)

        eventually_sync(settled, what="the Sentinels agreeing on a primary with its replica", timeout=timeout,
                        ignoring=(redis.ConnectionError, redis.ResponseError, StopIteration))

    # ------------------------------------------------------------------ what happens to a primary
    def _sync_replica(self) -> RedisServer:
        """Writes paused on the primary until the replica has all it acknowledged (Redis replicates
        asynchronously: without this a failover may lose the last writes, whoever made them)."""
        primary, replica = self.primary(), self.replica()
        self._client(primary).execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        offset = self._client(primary).info("replication")["master_repl_offset"]
        eventually_sync(lambda: self._client(replica).info("replication").get("slave_repl_offset", -1) >= offset,
                        what="the replica caught up", timeout=30)
        return replica

    def failover(self) -> RedisServer:
        """The Sentinels make the replica the primary (the old primary becomes its replica); returns it."""
        old = self.primary()
        replica = self._sync_replica()
        self.sentinels[0].client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        eventually_sync(lambda: self._named_by_all() == replica.port, what="every Sentinel naming the replica",
                        timeout=60)
        # Demoted at once (the Sentinels would in a few seconds): the writes waiting there are refused (READONLY)
        # and sent again to the new primary, never run where they would be lost.
        client = self._client(old)
        client.execute_command("REPLICAOF", "127.0.0.1", replica.port)
        client.execute_command("CLIENT", "UNPAUSE")
        self.wait_settled()
        return replica

    def kill_primary(self) -> RedisServer:
        """The primary killed -9; returns the replica once the Sentinels have elected it."""
        old = self.primary()
        replica = self._sync_replica()
        old.proc.kill()
        old.proc.wait(10)
        eventually_sync(lambda: self._named_by_all() == replica.port, what="the replica elected", timeout=60,
                        ignoring=(redis.ConnectionError,))
        return replica

    def restart(self, node: RedisServer) -> None:
        """A data node that was killed comes back; the Sentinels make it a replica of the primary."""
        node.start()
        self.wait_settled()

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.data:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
                try:
                    node.proc.wait(5)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
