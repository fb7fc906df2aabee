"""The stack under chaos: the processes `trellis up` starts (trellis_cli/up.py's `Stack`, supervised the same way:
a part that dies is started again with backoff), here with several orchestrator replicas, on a Redis of the
suite's own (chaos/redis_nodes.py, from the tests' fixtures). Each orchestrator reaches Redis through a TCP
proxy of its own (tests/support/tcp_proxy.py), so one replica can be cut off from Redis while the others are
not; a proxy's upstream follows the primary, as a managed Redis's endpoint follows its failovers. With the
replicated Redis (a replica and three Sentinels, for the failover fault) every replica but the last is
Sentinel's client instead (`redis+sentinel://`) and follows a failover itself; the last keeps its proxy. The
model behind the LLM gateway is the suite's counting server (chaos/model_server.py).

    async with ChaosStack(workdir, replicas=3, replicated=True, model_url=...) as stack:
        stack.url, stack.key; stack.part("orchestrator-1").pid; stack.links["orchestrator-1"].proxy
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chaos.redis_nodes import RedisNodes
from tests.support.tcp_proxy import TcpProxy
from services.common.open_files import raise_soft_limit
from trellis_cli.up import Child, RestartPolicy, Stack

API_KEY = "chaos-key"
TENANT = "chaos"
ORCHESTRATOR = "orchestrator"


def _free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 60000:  # room for the replicas' ports (port + 1000 i)
            return port


@dataclass
class RedisLink:
    """One orchestrator replica's way to Redis: a proxy whose upstream is the current primary."""

    name: str
    proxy: TcpProxy

    @property
    def url(self) -> str:
        return self.proxy.url("redis", "/0")


class ChaosStack:
    def __init__(self, workdir: Path, *, replicas: int, replicated: bool, model_url: str, lease_s: float,
                 proxied: bool = True, retention_s: int | None = None) -> None:
        self.workdir = workdir
        self.retention_s = retention_s  # runs and sessions kept this long (None: the stack's defaults)
        self.proxied = proxied  # False (the soak): every part reaches Redis directly
        self.replicas = replicas
        self.lease_s = lease_s
        self.model_url = model_url
        self.redis = RedisNodes(workdir / "redis", replicated=replicated)
        self.links: dict[str, RedisLink] = {}  # orchestrator replica -> its link
        self.suite_link: RedisLink | None = None  # the suite's own, never faulted: it follows failovers too
        self.stack: Stack | None = None
        self.http_port = _free_port()
        self._supervisor: asyncio.Task | None = None
        self._policy = RestartPolicy(max_exits=1000, window_s=60.0, backoff_s=0.5)
        self.restarts: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    key = API_KEY

    def _environment(self) -> None:
        """What the stack's processes read (trellis_cli/stack.py plans them from this process's environment)."""
        for name in [k for k in os.environ if k.startswith("TRELLIS_")]:
            del os.environ[name]
        ports = {k: _free_port() for k in ("ORCHESTRATOR", "LLM_GATEWAY", "RETRIEVAL", "SANDBOX")}
        os.environ.update({f"TRELLIS_{k}_PORT": str(p) for k, p in ports.items()})
        os.environ.update({f"TRELLIS_{k}_METRICS_PORT": str(_free_port()) for k in ports})
        os.environ.update({
            "TRELLIS_HTTP_PORT": str(self.http_port), "TRELLIS_DATA_DIR": str(self.workdir / "data"),
            "TRELLIS_REDIS_URL": f"redis://127.0.0.1:{self.redis.primary().port}/0",  # none of trellis up's own
            "TRELLIS_ORCHESTRATOR_REPLICAS": str(self.replicas), "TRELLIS_GATEWAY_REPLICAS": "1",
            "TRELLIS_RUN_LEASE_S": str(self.lease_s), "TRELLIS_LLM_LOCAL": "0",
            "TRELLIS_API_KEYS": f"{API_KEY}:{TENANT}", "TRELLIS_SANDBOX_ALLOW_UNSANDBOXED": "1",
            "OPENAI_BASE_URL": self.model_url, "OPENAI_API_KEY": "chaos",
        })
        if self.retention_s is not None:
            os.environ.update({"TRELLIS_RUN_TTL_S": str(self.retention_s),
                               "TRELLIS_SESSION_TTL_S": str(self.retention_s)})

    async def __aenter__(self) -> "ChaosStack":
        await asyncio.to_thread(self.redis.start)
        self._environment()
        stack = Stack(raise_soft_limit())  # as trellis up: every part inherits the raised limit
        upstream = ("127.0.0.1", self.redis.primary().port)
        if self.proxied:
            self.suite_link = RedisLink("suite", TcpProxy(*upstream))
            await self.suite_link.proxy.start()
        orchestrators = [p.name for p in stack.procs if p.name.startswith(ORCHESTRATOR)]
        procs = []
        for proc in stack.procs:
            if proc.name in orchestrators and self.redis.replicated and proc.name != orchestrators[-1]:
                # Sentinel's clients: they ask the Sentinels for the primary and follow a failover themselves
                # (one replica stays behind a proxy, for the network faults)
                proc = replace(proc, env={**proc.env, "TRELLIS_REDIS_URL": self.redis.sentinel_url})
            elif proc.name in orchestrators and self.proxied:
                proxy = TcpProxy(*upstream)
                await proxy.start()
                link = self.links[proc.name] = RedisLink(proc.name, proxy)
                proc = replace(proc, env={**proc.env, "TRELLIS_REDIS_URL": link.url})
            procs.append(proc)
        stack.procs = procs
        self.stack = stack
        try:
            await asyncio.to_thread(stack.start, 300.0)
        except BaseException:
            await self.aclose()
            raise
        self._supervisor = asyncio.create_task(self._supervise(), name="chaos-supervisor")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        if self.stack is not None:
            for child in self.stack.running:  # a stopped part would ignore its SIGTERM
                if child.popen is not None and child.popen.poll() is None:
                    child.popen.send_signal(signal.SIGCONT)
            await asyncio.to_thread(self.stack.stop, 15.0)
        for link in self._all_links():
            await link.proxy.aclose()
        await asyncio.to_thread(self.redis.stop)

    async def _supervise(self) -> None:
        """trellis up's supervision pass, as its own loop runs it; and the proxies follow the primary."""
        assert self.stack is not None
        primary = self.redis.primary().port
        while True:
            failing = self.stack.supervise(self._policy, time.monotonic())
            if failing is not None:
                raise RuntimeError(f"chaos: {failing.proc.name} keeps exiting [log: {failing.log_path}]")
            for child in self.stack.running:
                self.restarts[child.proc.name] = child.restarts
            now = primary
            if self.redis.replicated:
                try:
                    now = await asyncio.to_thread(lambda: self.redis.primary().port)
                except Exception:  # noqa: BLE001 (Sentinel busy failing over: asked again next pass)
                    pass
            if now != primary:
                primary = now
                for link in self._all_links():
                    link.proxy.upstream = ("127.0.0.1", primary)
                    link.proxy.cut()  # the old primary's connections are dead or stale: clients reconnect
            await asyncio.sleep(0.2)

    def _all_links(self) -> list[RedisLink]:
        return [*self.links.values(), *([self.suite_link] if self.suite_link else [])]

    # ---- parts ----------------------------------------------------------------------------------------------

    def part(self, name: str) -> Child:
        assert self.stack is not None
        return next(c for c in self.stack.running if c.proc.name == name)

    def orchestrators(self) -> list[str]:
        assert self.stack is not None
        return sorted(c.proc.name for c in self.stack.running if c.proc.name.startswith(ORCHESTRATOR))

    def pid(self, name: str) -> int | None:
        popen = self.part(name).popen
        return popen.pid if popen is not None and popen.poll() is None else None

    def signal(self, name: str, sig: signal.Signals) -> int:
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(f"chaos: {name} is not running")
        os.kill(pid, sig)
        return pid

    async def wait_serving(self, name: str, timeout: float = 120.0) -> None:
        """Until `name` (restarted after a kill) says SERVING again."""
        port = self.part(name).proc.grpc_port
        deadline = time.monotonic() + timeout
        while True:
            if self.pid(name) is not None and port is not None:
                try:
                    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                        resp = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                                              timeout=1.0)
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"chaos: {name} not serving again within {timeout:g} s")
            await asyncio.sleep(0.2)

    def redis_client(self) -> aioredis.Redis:
        """The suite's own view of Redis, through its own link (never faulted, follows the primary)."""
        port = self.suite_link.proxy.port if self.suite_link else self.redis.primary().port
        return aioredis.Redis(port=port, socket_timeout=5, socket_connect_timeout=2,
                              retry=Retry(ExponentialBackoff(cap=1.0), 10),
                              retry_on_error=[RedisConnectionError, RedisTimeout])
