"""The Redis side of the limits per tenant (services/orchestrator/limits/, docs/limits.md): the only code that
sends a command for them. Every key is tagged with its tenant (store/keys.py), so one tenant's limits live in one
Cluster slot and each call below touches that slot alone.

- Slots (concurrent runs, held streams): each replica leases a number of a scope's slots, a field of the scope's
  hash (`replica -> "<held>:<expiry ms>"`). `lease` sets this replica's leases of several scopes of one tenant
  in one script: each scope grants what its limit leaves after the other replicas' live leases (never less than
  what the replica already uses), drops the leases that expired (a dead replica's), and stamps the replica's
  own with a new expiry. So the leases of all replicas never sum past a limit by more than runs already
  running (a limit lowered under them, a run taken over from a dead replica).
- Windows (runs started per second, LLM tokens per minute): the `limits` package's moving window on this Redis
  (as store/webhook_triggers.py uses it), hit with `cost=k` to lease k units at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter

from services.orchestrator.store import keys
from services.orchestrator.store.redis_client import limits_storage
from services.orchestrator.store.redis_target import RedisTarget

# KEYS: the scopes' lease hashes (one tenant). ARGV: owner, ttl ms, then per key: used, want, limit.
# Returns per key what the owner holds now: max(used, min(want, limit - the others' live leases)).
_LEASE = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local held = {}
for i, key in ipairs(KEYS) do
  local used, want, limit = tonumber(ARGV[i * 3]), tonumber(ARGV[i * 3 + 1]), tonumber(ARGV[i * 3 + 2])
  local others = 0
  local entries = redis.call('HGETALL', key)
  for j = 1, #entries, 2 do
    local count, expiry = string.match(entries[j + 1], '^(%d+):(%d+)$')
    if not count or tonumber(expiry) <= now then
      redis.call('HDEL', key, entries[j])
    elseif entries[j] ~= owner then
      others = others + tonumber(count)
    end
  end
  local grant = math.max(used, math.min(want, limit - others))
  if grant > 0 then
    redis.call('HSET', key, owner, grant .. ':' .. (now + ttl))
    redis.call('PEXPIRE', key, ttl * 2)
  else
    redis.call('HDEL', key, owner)
  end
  held[i] = grant
end
return held
"""


@dataclass(frozen=True)
class SlotWant:
    """One scope's lease asked for: its key part, what the replica uses, what it would hold, the limit."""

    scope: str
    used: int
    want: int
    limit: int


class LimitStore:
    def __init__(self, redis: aioredis.Redis, redis_url: RedisTarget | str, *, owner: str, lease_ttl_s: float) -> None:
        self.owner = owner
        self.lease_ttl_s = lease_ttl_s
        self._redis = redis
        self._lease = redis.register_script(_LEASE)
        # (the same Redis, whichever kind: a cluster, Sentinel's primary, TLS)
        self._windows = MovingWindowRateLimiter(limits_storage(redis_url, "trellis:limits"))

    # ---- slots -----------------------------------------------------------------------------------------
    async def lease(self, tenant: str, kind: str, wants: list[SlotWant]) -> list[int]:
        """Set this replica's leases of the tenant's scopes (`kind` runs or streams) in one round trip: what it
        holds of each now."""
        if not wants:
            return []
        args: list = [self.owner, max(1, round(self.lease_ttl_s * 1000))]
        for w in wants:
            args += [w.used, w.want, w.limit]
        held = await self._lease(keys=[keys.limit_leases(tenant, kind, w.scope) for w in wants], args=args)
        return [int(h) for h in held]

    async def leases(self, tenant: str, kind: str, scope: str) -> dict[str, int]:
        """Every replica's live lease of a scope (expired ones left out): for inspection and tests."""
        raw = await self._redis.hgetall(keys.limit_leases(tenant, kind, scope))
        now_ms = time.time() * 1000
        found = {}
        for owner, value in raw.items():
            count, _, expiry = _text(value).partition(":")
            if int(expiry or 0) > now_ms:
                found[_text(owner)] = int(count)
        return found

    # ---- windows ---------------------------------------------------------------------------------------
    async def take(self, tenant: str, what: str, scope: str, amount: int, window_s: int, cost: int) -> bool:
        """`cost` units of a moving window of `amount` per `window_s` seconds (`what` starts or tokens); False
        when the window has not that many left."""
        return await self._windows.hit(RateLimitItemPerSecond(amount, window_s),
                                       keys.limit_window(tenant, what, scope), cost=cost)

    async def free_in(self, tenant: str, what: str, scope: str, amount: int, window_s: int) -> float:
        """Seconds until the window has a unit free again (0 when it has one now)."""
        stats = await self._windows.get_window_stats(RateLimitItemPerSecond(amount, window_s),
                                                     keys.limit_window(tenant, what, scope))
        return 0.0 if stats.remaining > 0 else max(0.0, stats.reset_time - time.time())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
