"""Each replica's admission figures per tenant, shared through Redis so any replica can answer for all of them
(CanvasService/GetTenantAdmission, docs/limits.md "Seen"): the only code that names their keys.

A tenant's figures are one hash (store/keys.py `tenant_admission`, tagged with the tenant: one Cluster slot),
a field per replica holding `<expiry ms>|<JSON of counts>`. A replica writes its own field in the background
(limits/gate.py, about once a second, never on a run's path); a reader sums the fields still live. Expiry is
Redis's clock (TIME) on both sides, so replicas' clocks may differ; a dead replica's field is dropped by the
first read after it expired, and the whole hash expires once no replica writes it.
"""

from __future__ import annotations

import json
from collections import Counter

import redis.asyncio as aioredis

from services.orchestrator.store import keys
from services.orchestrator.store._records import queue_script

# KEYS[1]: the tenant's hash. ARGV: owner, ttl ms, figures JSON.
_WRITE = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], (now + ttl) .. '|' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return 1
"""

# KEYS[1]: the tenant's hash. Returns the live fields' JSON; drops the expired ones.
_READ = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local live = {}
local entries = redis.call('HGETALL', KEYS[1])
for j = 1, #entries, 2 do
  local expiry, figures = string.match(entries[j + 1], '^(%d+)|(.*)$')
  if not expiry or tonumber(expiry) <= now then
    redis.call('HDEL', KEYS[1], entries[j])
  else
    live[#live + 1] = figures
  end
end
return live
"""


class AdmissionFigureStore:
    def __init__(self, redis: aioredis.Redis, *, owner: str, ttl_s: float) -> None:
        self.owner = owner
        self.ttl_s = ttl_s
        self._redis = redis
        self._write = redis.register_script(_WRITE)
        self._read = redis.register_script(_READ)

    async def write(self, figures: dict[str, dict[str, int]]) -> None:
        """This replica's figures of each tenant given (tenant -> name -> count), live for `ttl_s`: a script per
        tenant (each tenant is its own slot), in one pipeline (on a cluster, one round trip per node)."""
        ttl_ms = max(1, round(self.ttl_s * 1000))
        async with self._redis.pipeline(transaction=False) as pipe:
            for tenant, counts in figures.items():
                queue_script(pipe, self._write, [keys.tenant_admission(tenant)],
                             [self.owner, ttl_ms, json.dumps(counts, separators=(",", ":"))])
            await pipe.execute()

    async def read(self, tenant: str) -> tuple[dict[str, int], int]:
        """The tenant's figures summed over every replica whose field is live, and how many replicas those are."""
        live = await self._read(keys=[keys.tenant_admission(tenant)])
        total: Counter[str] = Counter()
        for raw in live:
            total.update(json.loads(raw))
        return dict(total), len(live)
