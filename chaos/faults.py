"""The faults, one class each: what it does to the stack, whom (chosen by the suite's seeded random), and what
it found when it struck (`notes`, for the report). Each returns once the stack is whole again (a killed part
restarted and serving, Redis answering, the proxy passing), so the next fault meets a healthy stack.

| fault | what |
|---|---|
| orchestrator_sigkill | kill -9 of an orchestrator replica that owns runs (trellis up's supervision restarts it) |
| orchestrator_sigstop | SIGSTOP of a replica that owns runs, SIGCONT 30 s later: it wakes up a stale owner |
| llm_gateway_kill | kill -9 of the LLM gateway while model answers stream through it |
| sandbox_kill | kill -9 of the sandbox under a steady load of code runs |
| redis_restart | kill -9 of the Redis primary, started again on its port from its AOF |
| redis_failover | kill -9 of the primary; Sentinel promotes the replica, the proxies follow; the old one rejoins as replica |
| partition | one replica's link to Redis goes silent (a blackhole) for 20 s, then delivers what it held |
| ambiguous_writes | for 5 s each write one replica sends is applied, then its connection cut before the reply |
"""

from __future__ import annotations

import abc
import asyncio
import collections
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psutil

from chaos.claims import ClaimWatch, owner_pid
from chaos.model_server import ModelServer
from chaos.stack import ChaosStack


@dataclass
class Struck:
    """One fault as it happened."""

    fault: str
    target: str
    at: float  # monotonic, when it struck
    until: float = 0.0  # when the stack was whole again
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class FaultContext:
    stack: ChaosStack
    model: ModelServer
    claims: ClaimWatch
    rng: random.Random
    watches: list[asyncio.Task] = field(default_factory=list)


async def runs_owned(ctx: FaultContext, pid: int) -> int:
    """How many running runs `pid`'s replica holds the lease of."""
    redis = ctx.claims.redis
    count = 0
    async for key in redis.scan_iter(match="run:{*}:lease", count=1000):
        owner = await redis.get(key)
        count += bool(owner and owner_pid(owner.decode()) == pid)
    return count


async def until(check, what: str, timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"chaos: {what} not within {timeout:g} s")
        await asyncio.sleep(every)


class Fault(abc.ABC):
    name: ClassVar[str]

    @abc.abstractmethod
    async def strike(self, ctx: FaultContext) -> Struck:
        """Strike once, on a victim and at a moment drawn from `ctx.rng`; what was hit."""


class _ReplicaGone(Fault):
    """A replica that owns runs goes away (`take_away`) and comes back (`bring_back`); the claims of its sessions
    are watched from the moment it went."""

    network = False  # True: only a replica behind a proxy of the suite can be the victim

    @abc.abstractmethod
    async def take_away(self, ctx: FaultContext, name: str) -> None:
        """Take the replica `name` away."""

    @abc.abstractmethod
    async def bring_back(self, ctx: FaultContext, name: str) -> None:
        """Bring the replica `name` back."""

    async def strike(self, ctx: FaultContext) -> Struck:
        name = ctx.rng.choice(sorted(ctx.stack.links) if self.network else ctx.stack.orchestrators())
        pid = ctx.stack.pid(name)
        assert pid is not None
        claims = await until(lambda: ctx.claims.owned_by(pid), f"{name} owning a run on a session")
        owned = await runs_owned(ctx, pid)
        await self.take_away(ctx, name)
        struck = Struck(self.name, name, time.monotonic(), notes={"runs_owned": owned, "sessions_claimed": len(claims)})
        ctx.watches.append(asyncio.create_task(ctx.claims.watch(claims, struck.at, self.name)))
        await self.bring_back(ctx, name)
        struck.until = time.monotonic()
        if ctx.stack.pid(name) == pid:  # the same process again: how many of its runs others took meanwhile
            struck.notes["runs_taken_from_it"] = max(0, owned - await runs_owned(ctx, pid))
        struck.notes["back_after_s"] = round(struck.until - struck.at, 1)
        return struck


class OrchestratorKill(_ReplicaGone):
    name = "orchestrator_sigkill"

    async def take_away(self, ctx: FaultContext, name: str) -> None:
        ctx.stack.signal(name, signal.SIGKILL)

    async def bring_back(self, ctx: FaultContext, name: str) -> None:
        await ctx.stack.wait_serving(name)  # trellis up's supervision starts it again


class OrchestratorStop(_ReplicaGone):
    name = "orchestrator_sigstop"
    stopped_s = 30.0

    async def take_away(self, ctx: FaultContext, name: str) -> None:
        ctx.stack.signal(name, signal.SIGSTOP)

    async def bring_back(self, ctx: FaultContext, name: str) -> None:
        try:
            await asyncio.sleep(self.stopped_s)
        finally:
            ctx.stack.signal(name, signal.SIGCONT)


class _PartKill(Fault):
    part: ClassVar[str]

    async def ready(self, ctx: FaultContext) -> dict[str, Any]:
        return {}

    async def strike(self, ctx: FaultContext) -> Struck:
        notes = await self.ready(ctx)
        ctx.stack.signal(self.part, signal.SIGKILL)
        struck = Struck(self.name, self.part, time.monotonic(), notes=notes)
        await ctx.stack.wait_serving(self.part)
        struck.until = time.monotonic()
        struck.notes["back_after_s"] = round(struck.until - struck.at, 1)
        return struck


class LlmGatewayKill(_PartKill):
    name, part = "llm_gateway_kill", "llm_gateway"

    async def ready(self, ctx: FaultContext) -> dict[str, Any]:
        async def streaming() -> int:
            return ctx.model.in_flight
        return {"model_answers_in_flight": await until(streaming, "a model answer streaming")}


class SandboxKill(_PartKill):
    name, part = "sandbox_kill", "sandbox"

    async def ready(self, ctx: FaultContext) -> dict[str, Any]:
        sandbox = psutil.Process(ctx.stack.pid(self.part))

        async def executing() -> int:  # each execution is a child process of the sandbox
            return len(sandbox.children())
        return {"executions_in_flight": await until(executing, "code executing in the sandbox", every=0.02)}


class RedisRestart(Fault):
    name = "redis_restart"

    async def strike(self, ctx: FaultContext) -> Struck:
        redis = ctx.stack.redis
        node = redis.primary()
        redis.kill(node)
        struck = Struck(self.name, redis.name(node), time.monotonic())
        await asyncio.to_thread(redis.start_again, node)
        struck.until = time.monotonic()
        struck.notes["down_s"] = round(struck.until - struck.at, 2)
        return struck


class RedisFailover(Fault):
    name = "redis_failover"

    async def strike(self, ctx: FaultContext) -> Struck:
        redis = ctx.stack.redis
        old, new = redis.primary(), redis.replica()
        if new is None:
            raise RuntimeError("chaos: redis_failover needs the replicated Redis (the runner starts it when asked)")
        lag = await asyncio.to_thread(redis.unreplicated_bytes)
        redis.kill(old)  # no pause, no sync first: a primary that dies
        struck = Struck(self.name, f"{redis.name(old)} -> {redis.name(new)}", time.monotonic(),
                        notes={"unreplicated_bytes": lag})
        await asyncio.to_thread(redis.wait_promoted, new)
        struck.notes["promoted_after_s"] = round(time.monotonic() - struck.at, 1)
        await asyncio.to_thread(redis.rejoin, old)  # the Sentinels make it a replica of the new primary
        struck.until = time.monotonic()
        return struck


class Partition(_ReplicaGone):
    name = "partition"
    network = True
    silent_s = 20.0

    async def take_away(self, ctx: FaultContext, name: str) -> None:
        ctx.stack.links[name].proxy.pause()

    async def bring_back(self, ctx: FaultContext, name: str) -> None:
        try:
            await asyncio.sleep(self.silent_s)
        finally:
            ctx.stack.links[name].proxy.heal()


class AmbiguousWrites(Fault):
    """For `window_s`, every write one replica sends to Redis in turn is applied and then its connection cut before
    the reply arrives (the proxy's `cut_after`): the replica cannot know whether it happened."""

    name = "ambiguous_writes"
    window_s = 5.0
    writes = frozenset({b"EVALSHA", b"EVAL", b"HSET", b"SET", b"DEL", b"XADD", b"RPUSH", b"ZADD", b"ZREM",
                        b"EXPIRE", b"PEXPIRE", b"HINCRBY", b"MULTI", b"EXEC"})

    async def strike(self, ctx: FaultContext) -> Struck:
        name = ctx.rng.choice(sorted(ctx.stack.links))
        proxy = ctx.stack.links[name].proxy
        struck = Struck(self.name, f"{name} | redis", time.monotonic())
        cut: list[str] = []
        deadline = struck.at + self.window_s
        while (left := deadline - time.monotonic()) > 0:
            armed = proxy.cut_after(lambda command: command[0].upper() in self.writes)
            try:
                command = await asyncio.wait_for(asyncio.shield(armed), left)
            except asyncio.TimeoutError:
                armed.cancel()  # no write came in time: the cut is disarmed
                break
            cut.append(command[0].decode().upper())
        struck.until = time.monotonic()
        struck.notes = {"writes_cut": len(cut), "commands": dict(collections.Counter(cut))}
        return struck


FAULTS: dict[str, type[Fault]] = {f.name: f for f in (
    OrchestratorKill, OrchestratorStop, LlmGatewayKill, SandboxKill, RedisRestart, RedisFailover, Partition,
    AmbiguousWrites)}

__all__ = ["FAULTS", "Fault", "FaultContext", "Struck"]
