"""A real Redis Cluster for the tests: three primaries, each with a replica, all from the redis-server `trellis up`
uses, in a temporary directory, built as an operator builds one (CLUSTER MEET, ADDSLOTS, REPLICATE); and the
changes a cluster goes through while it serves, each done the way Redis does it:

- `migrate_slot`: a slot moves to another primary (SETSLOT IMPORTING and MIGRATING, MIGRATE of its keys,
  SETSLOT NODE), clients meeting ASK during the move and MOVED after it;
- `failover`: a replica takes over from its live primary (CLUSTER FAILOVER: it catches up first, nothing lost);
- `kill`: a primary is killed -9; its replica is elected in its place after the node timeout.

    cluster = RedisClusterServers(tmp_path)
    cluster.start()
    cluster.url                     # "redis+cluster://127.0.0.1:<port>,..." (TRELLIS_REDIS_URL)
    cluster.primary_of_key(key)     # the node serving a key now
"""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.support.net import free_port
from tests.support.redis_server import RedisServer
from tests.support.redis_tls import TLS_REDIS_SERVER, Certificates, tls_server_args
from tests.support.waiting import eventually_sync

SLOTS = 16384


class ClusterNodeServer(RedisServer):
    """One node of the cluster: cluster mode on, its slots and role given by `RedisClusterServers`."""

    def __init__(self, workdir: Path, node_timeout_ms: int, args: tuple[str, ...] = ()) -> None:
        super().__init__(workdir, args=(
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms), *args))

    def _free_port(self) -> int:
        return free_port(with_offset=10000)  # its bus listens on port + 10000

    @property
    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    @property
    def node_id(self) -> str:
        return self.client.execute_command("CLUSTER", "MYID").decode()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def role(self) -> str:
        return self.client.execute_command("ROLE")[0].decode()  # "master" or "slave"

    def stop(self) -> None:
        """Stopped for good: SIGTERM, then SIGKILL if Redis refuses to exit (it does while writing its first
        AOF, as a replica that has just synced does)."""
        if self.alive:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def __repr__(self) -> str:
        return f"<node :{self.port}>"


class RedisClusterServers:
    def __init__(self, root: Path, *, primaries: int = 3, replicas_each: int = 1, node_timeout_ms: int = 1000,
                 args: tuple[str, ...] = (), tls: Certificates | None = None) -> None:
        """`args`: more redis-server options for every node. `tls`: the nodes serve TLS too, on a port of their
        own (`tls_ports`), their bus and replication over TLS (Debian's redis-server: tests/support/redis_tls.py);
        `url` is then the TLS one, and the fixture itself keeps the plain ports."""
        self.tls = tls
        # (with TLS on the bus, a node's bus listens at its TLS port + 10000)
        self.tls_ports = [free_port(with_offset=10000) for _ in range(primaries * (1 + replicas_each))] if tls else []
        self.nodes = [ClusterNodeServer(root / f"node-{i}", node_timeout_ms,
                                        (*args, *(tls_server_args(tls, self.tls_ports[i]) if tls else ())))
                      for i in range(primaries * (1 + replicas_each))]
        if tls:
            for node in self.nodes:
                node.binary = TLS_REDIS_SERVER
        for node in self.nodes:
            node.workdir.mkdir(parents=True, exist_ok=True)
        self.first_primaries = self.nodes[:primaries]
        self.replicas_each = replicas_each

    @property
    def url(self) -> str:
        if self.tls:
            return "rediss+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.tls_ports)
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    # ------------------------------------------------------------------ building it
    def start(self) -> None:
        for node in self.nodes:
            node.start()
        first = self.nodes[0].client
        for i, node in enumerate(self.nodes[1:], 1):
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", self.tls_ports[i] if self.tls else node.port)
        eventually_sync(lambda: all(self._known(n) == len(self.nodes) for n in self.nodes),
                        what="every cluster node knowing every other", timeout=30)
        primaries = self.first_primaries
        bounds = [SLOTS * i // len(primaries) for i in range(len(primaries) + 1)]
        for node, low, high in zip(primaries, bounds, bounds[1:]):
            node.client.execute_command("CLUSTER", "ADDSLOTS", *range(low, high))
        replicas = self.nodes[len(primaries):]
        for i, replica in enumerate(replicas):
            primary = primaries[i % len(primaries)]
            primary_id = primary.node_id
            eventually_sync(lambda: self._replicate(replica, primary_id), what=f"{replica} replicating {primary}",
                            timeout=30, ignoring=(redis.ResponseError,))
        self.wait_settled()

    @staticmethod
    def _known(node: ClusterNodeServer) -> int:
        return len(node.client.execute_command("CLUSTER", "NODES").decode().strip().splitlines())

    @staticmethod
    def _replicate(replica: ClusterNodeServer, primary_id: str) -> bool:
        return bool(replica.client.execute_command("CLUSTER", "REPLICATE", primary_id))

    def wait_settled(self, timeout: float = 60) -> None:
        """Until every live node says the cluster is ok, they agree on who serves each slot, and every
        replica is in sync with its primary."""
        def settled() -> bool:
            live = [n for n in self.nodes if n.alive]
            if not all(b"cluster_state:ok" in n.client.execute_command("CLUSTER", "INFO") for n in live):
                return False
            views = {self._slot_view(n) for n in live}
            if len(views) != 1:
                return False
            return all(self._in_sync(n) for n in live if n.role() == "slave")

        eventually_sync(settled, what="the cluster settled", timeout=timeout,
                        ignoring=(redis.ConnectionError, redis.ResponseError))

    @staticmethod
    def _slot_view(node: ClusterNodeServer) -> tuple:
        return tuple(sorted((int(r[0]), int(r[1]), int(r[2][1]), tuple(sorted(int(x[1]) for x in r[3:])))
                            for r in node.client.execute_command("CLUSTER", "SLOTS")))

    @staticmethod
    def _in_sync(replica: ClusterNodeServer) -> bool:
        info = replica.client.info("replication")
        return info.get("master_link_status") == "up" and info.get("master_sync_in_progress") == 0

    # ------------------------------------------------------------------ who serves what
    def by_port(self, port: int) -> ClusterNodeServer:
        return next(n for n in self.nodes if n.port == port)

    def primary_of_slot(self, slot: int) -> ClusterNodeServer:
        live = next(n for n in self.nodes if n.alive)
        for low, high, primary, *_ in live.client.execute_command("CLUSTER", "SLOTS"):
            if low <= slot <= high:
                return self.by_port(int(primary[1]))
        raise LookupError(f"slot {slot} is served by no node")

    def primary_of_key(self, key: str) -> ClusterNodeServer:
        return self.primary_of_slot(key_slot(key.encode()))

    def primaries(self) -> list[ClusterNodeServer]:
        return [n for n in self.nodes if n.alive and n.role() == "master"]

    def replica_of(self, primary: ClusterNodeServer) -> ClusterNodeServer:
        """A live replica of `primary` (CLUSTER REPLICAS: lines of CLUSTER NODES, `<id> <ip>:<port>@<bus> ...`)."""
        lines = primary.client.execute_command("CLUSTER", "REPLICAS", primary.node_id)
        for line in lines:
            fields = line.decode().split()
            if "fail" not in fields[2]:
                node = self.by_port(int(fields[1].split("@")[0].rsplit(":", 1)[1]))
                if node.alive:
                    return node
        raise LookupError(f"{primary} has no live replica")

    # ------------------------------------------------------------------ what happens to a cluster
    def begin_migration(self, slot: int, target: ClusterNodeServer) -> ClusterNodeServer:
        """The slot starts moving to `target`: from now on its owner answers ASK for a key it does not have."""
        source = self.primary_of_slot(slot)
        assert source is not target, f"slot {slot} is already on {target}"
        target.client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        source.client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        return source

    @staticmethod
    def move_keys(slot: int, source: ClusterNodeServer, target: ClusterNodeServer, names: list | None = None) -> int:
        """MIGRATE the keys of a migrating slot that `source` has (of `names`, when given) to `target`."""
        present = source.client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if names is not None:
            wanted = {n.encode() if isinstance(n, str) else n for n in names}
            present = [n for n in present if n in wanted]
        if present:
            source.client.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *present)
        return len(present)

    def finish_migration(self, slot: int, source: ClusterNodeServer, target: ClusterNodeServer) -> int:
        """Move the slot's keys (MIGRATE), then give the slot to `target` everywhere: clients meet MOVED.
        Returns how many keys moved."""
        moved = 0
        while n := self.move_keys(slot, source, target):
            moved += n
        target_id = target.node_id
        for node in [target, source, *(n for n in self.primaries() if n not in (target, source))]:
            node.client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.wait_settled()
        return moved

    def migrate_slot(self, slot: int, target: ClusterNodeServer) -> int:
        return self.finish_migration(slot, self.begin_migration(slot, target), target)

    def failover(self, replica: ClusterNodeServer) -> None:
        """A manual failover: `replica` catches up with its primary, then takes its slots; nothing is lost."""
        replica.client.execute_command("CLUSTER", "FAILOVER")
        eventually_sync(lambda: replica.role() == "master", what=f"{replica} promoted", timeout=30)
        self.wait_settled()

    def kill_primary(self, primary: ClusterNodeServer) -> ClusterNodeServer:
        """Kill -9 a primary once its replica has everything it acknowledged; returns the replica once it has
        been elected in its place."""
        replica = self.kill_synced(primary)
        self.wait_elected(replica)
        return replica

    def kill_synced(self, primary: ClusterNodeServer) -> ClusterNodeServer:
        """Kill -9 a primary once its replica has everything it acknowledged (writes paused, the replica caught
        up: Redis replicates asynchronously, so without this a kill may lose the last writes, whoever made them);
        returns that replica, which the cluster elects in its place after the node timeout."""
        replica = self.replica_of(primary)
        primary.client.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        offset = primary.client.info("replication")["master_repl_offset"]
        eventually_sync(lambda: replica.client.info("replication").get("slave_repl_offset", -1) >= offset,
                        what=f"{replica} caught up with {primary}", timeout=30)
        primary.kill()
        return replica

    def wait_elected(self, replica: ClusterNodeServer) -> None:
        eventually_sync(lambda: replica.role() == "master", what=f"{replica} elected primary", timeout=60,
                        ignoring=(redis.ConnectionError,))
        self.wait_settled()

    def restart(self, node: ClusterNodeServer) -> None:
        """A node that was killed comes back (as a replica of whoever took its slots)."""
        node.start()
        self.wait_settled()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
