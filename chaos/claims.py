"""`claim_released`: no session stays claimed longer than a lease after its owner died.

Before a fault takes a replica away (killed, stopped, cut off from Redis) the suite notes the sessions claimed by
runs that replica owns (a session's `active_run` holds the run, the run's lease holds its owner, whose id names
its pid: services/orchestrator/app.py). From the fault on it polls each claim until it is gone or held for a run
whose lease another owner holds; that moment minus the fault's is the claim's time after its owner's death,
which must stay within a lease (plus `slack_s` for the polling itself).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from chaos.invariants import Check
from services.orchestrator.store import keys

POLL_S = 0.1


def owner_pid(owner: str) -> int | None:
    """The pid in a replica id `<host>-<pid>-<random>`."""
    try:
        return int(owner.rsplit("-", 2)[-2])
    except (IndexError, ValueError):
        return None


@dataclass
class Claim:
    session_key: str
    run_id: str
    owner: str


@dataclass
class ClaimWatch:
    redis: aioredis.Redis
    tenant: str
    lease_s: float
    slack_s: float = 1.0
    check: Check = field(default_factory=lambda: Check(
        "claim_released", "no session stays claimed longer than a lease after its owner died"))
    seconds: list[float] = field(default_factory=list)  # each claim's time after its owner's death

    async def owned_by(self, pid: int) -> list[Claim]:
        """The sessions claimed now by runs whose lease `pid`'s replica holds."""
        claims = []
        async for key in self.redis.scan_iter(match=f"t:{self.tenant}:session:*:active_run", count=1000):
            run_id = await self.redis.get(key)
            if not run_id:
                continue
            owner = await self.redis.get(keys.run_lease(run_id.decode()))
            if owner and owner_pid(owner.decode()) == pid:
                claims.append(Claim(key.decode(), run_id.decode(), owner.decode()))
        return claims

    async def watch(self, claims: list[Claim], died_at: float, fault: str) -> None:
        """Poll `claims` (their owner died at `died_at`, monotonic) until each is released; count each."""
        pending = list(claims)
        bound = self.lease_s + self.slack_s
        while pending:
            now = time.monotonic()
            still = []
            for claim in pending:
                try:
                    holder = await self.redis.get(claim.session_key)
                    owner = await self.redis.get(keys.run_lease(holder.decode())) if holder else None
                except RedisError:  # Redis restarting under another fault: asked again next poll
                    still.append(claim)
                    continue
                if holder is None or (owner is not None and owner.decode() != claim.owner):
                    self._released(claim, now - died_at, bound, fault)
                else:
                    still.append(claim)
            pending = still
            if pending and time.monotonic() - died_at > 4 * bound:
                for claim in pending:  # far past the bound: counted, not waited for
                    self._released(claim, time.monotonic() - died_at, bound, fault)
                return
            await asyncio.sleep(POLL_S)

    def _released(self, claim: Claim, after: float, bound: float, fault: str) -> None:
        self.seconds.append(after)
        self.check.count(after <= bound, f"{fault}: session {claim.session_key} (run {claim.run_id}) claimed "
                                         f"{after:.1f} s after its owner died (lease {self.lease_s:g} s)", claim.run_id)
