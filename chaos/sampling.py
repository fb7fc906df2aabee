"""What the soak samples: each process of the stack (RSS, open files, and the asyncio tasks its metrics say:
`trellis_asyncio_tasks`, services/common/metrics.py) and Redis (memory, keys, keys without a TTL, the shared
indexes a run passes through). A restarted part is a new process: samples carry its pid.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass

import aiohttp
import psutil
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from chaos.stack import ChaosStack

ACTIVE_RUNS = "trellis:runs:active"  # services/orchestrator/store/keys.py: running runs by lease expiry


@dataclass
class ProcessSample:
    t: float  # monotonic
    part: str
    pid: int
    rss_mib: float
    fds: int
    tasks: int | None  # None: its metrics did not answer
    # quiet windows only: the TCP connections it holds, counted by what is at the other end ("redis",
    # "llm_gateway", "client" for one accepted on its own port...), so a change in `fds` says what it is
    peers: dict[str, int] | None = None


def _metrics_url(stack: ChaosStack, part: str) -> str | None:
    """Where `part` serves Prometheus text: a service's metrics port, the gateway's HTTP port."""
    child = stack.part(part)
    if part.startswith("gateway"):
        return f"{stack.url}/metrics"
    name = part.split("-")[0].upper()
    port = child.env.get(f"TRELLIS_{name}_METRICS_PORT")
    return f"http://127.0.0.1:{port}/metrics" if port and port != "0" else None


async def _tasks(http: aiohttp.ClientSession, url: str | None) -> int | None:
    if url is None:
        return None
    try:
        async with http.get(url) as resp:
            text = await resp.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None
    for family in text_string_to_metric_families(text):
        if family.name == "trellis_asyncio_tasks":
            return int(family.samples[0].value)
    return None


def _port_names(stack: ChaosStack) -> dict[int, str]:
    """What listens on each port of the stack: TRELLIS_<PART>_PORT as trellis up plans it, and the Redis nodes."""
    names = {int(v): k[len("TRELLIS_"):-len("_PORT")].lower() for k, v in os.environ.items()
             if k.startswith("TRELLIS_") and k.endswith("_PORT") and v.isdigit()}
    names.update({port: "redis" for port in stack.redis.ports()})
    return names


def _peers(proc: psutil.Process, names: dict[int, str]) -> dict[str, int]:
    """Its established TCP connections by the far end's name; one accepted on a port of its own is a client."""
    out: dict[str, int] = {}
    for conn in proc.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_ESTABLISHED or not conn.raddr:
            continue
        if conn.laddr.port in names and conn.raddr.port not in names:
            name = "client"
        else:
            name = names.get(conn.raddr.port, "other")
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


async def sample_processes(stack: ChaosStack, http: aiohttp.ClientSession, *, peers: bool = False
                           ) -> list[ProcessSample]:
    assert stack.stack is not None
    now = time.monotonic()
    names = _port_names(stack) if peers else {}
    out = []
    for child in stack.stack.running:
        pid = stack.pid(child.proc.name)
        if pid is None:
            continue
        try:
            proc = psutil.Process(pid)
            rss, fds = proc.memory_info().rss / 2**20, proc.num_fds()
            held = _peers(proc, names) if peers else None
        except psutil.Error:
            continue
        out.append(ProcessSample(now, child.proc.name, pid, round(rss, 2), fds,
                                 await _tasks(http, _metrics_url(stack, child.proc.name)), held))
    for name, pid in stack.redis.processes():
        proc = psutil.Process(pid)
        out.append(ProcessSample(now, name, pid, round(proc.memory_info().rss / 2**20, 2), proc.num_fds(), None))
    return out


@dataclass
class RedisSample:
    t: float
    used_memory_mib: float
    keys: int
    active_runs: int
    claimed_sessions: int | None = None  # counted in quiet windows only (a SCAN)
    keys_without_ttl: int | None = None  # likewise

    def as_dict(self) -> dict:
        return asdict(self)


async def sample_redis(redis: aioredis.Redis, *, scan: bool) -> RedisSample:
    info = await redis.info("memory")
    sample = RedisSample(time.monotonic(), round(info["used_memory"] / 2**20, 2), await redis.dbsize(),
                         await redis.zcard(ACTIVE_RUNS))
    if scan:
        claimed = without_ttl = 0
        batch: list[bytes] = []
        async for key in redis.scan_iter(count=1000):
            claimed += key.endswith(b":active_run")
            batch.append(key)
            if len(batch) == 500:
                without_ttl += await _without_ttl(redis, batch)
                batch = []
        without_ttl += await _without_ttl(redis, batch)
        sample.claimed_sessions, sample.keys_without_ttl = claimed, without_ttl
    return sample


async def _without_ttl(redis: aioredis.Redis, batch: list[bytes]) -> int:
    if not batch:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for key in batch:
            pipe.ttl(key)
        return sum(ttl == -1 for ttl in await pipe.execute())
