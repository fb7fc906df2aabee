"""What RAGFlow's webhook trigger keeps in Redis beside the runs it starts (gateway/routes/webhooks.py):

- each agent's rate limit, shared by every gateway replica as RAGFlow's (a token bucket in its Redis) is: the
  `limits` package's moving window on this Redis, `limit` requests in any `window_s`, keyed by tenant and agent;
- the log of the agent's test webhooks (`/webhook/test`), RAGFlow's `webhook-trace-<agent>-logs`: per webhook
  (keyed by its start time) the events its run sent, each with its `ts`, the whole log expiring 600 s after
  its last write (RAGFlow's TTL). One hash per agent, a field per webhook holding a list of JSON events, so an
  append is one HSET of that webhook's field instead of RAGFlow's read-modify-write of the whole log.
"""
from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter

from services.orchestrator.store import keys
from services.orchestrator.store.redis_client import limits_storage
from services.orchestrator.store.redis_target import RedisTarget

LOG_TTL_S = 600  # RAGFlow's webhook trace TTL

# Appends the events to one webhook's list (a field of the agent's log hash) and renews the log's TTL.
_APPEND = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
local events = current and cjson.decode(current) or {}
for i = 3, #ARGV do events[#events + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(events))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return #events
"""


def log_key(tenant: str, agent_id: str) -> str:
    return f"{keys.agent(tenant, agent_id)}:webhook_test_log"


def limits_uri(redis_url: str) -> str:
    """The `limits` storage URI of the orchestrator's Redis (`redis://` -> `async+redis://`). For one Redis
    without TLS only: redis_client.limits_storage reaches every kind of Redis the orchestrator does."""
    parts = urlsplit(redis_url)
    scheme = parts.scheme if parts.scheme.startswith("async+") else f"async+{parts.scheme or 'redis'}"
    return urlunsplit((scheme, *parts[1:]))


class WebhookTriggerStore:
    def __init__(self, redis: aioredis.Redis, target: RedisTarget | str) -> None:
        self._redis = redis
        self._append = redis.register_script(_APPEND)
        self._limiter = MovingWindowRateLimiter(limits_storage(target, "trellis:webhook_rate"))

    async def take(self, tenant: str, agent_id: str, limit: int, window_s: int) -> bool:
        """One request of the agent's window; False when `limit` were taken in the last `window_s` seconds."""
        item = RateLimitItemPerSecond(limit, window_s)
        return await self._limiter.hit(item, keys.agent(tenant, agent_id))

    async def append(self, tenant: str, agent_id: str, start_ts: str, events: list[str]) -> None:
        await self._append(keys=[log_key(tenant, agent_id)], args=[start_ts, LOG_TTL_S, *events])

    async def webhooks(self, tenant: str, agent_id: str) -> dict[str, list[str]]:
        """{start_ts: [event JSON, ...]} of every test webhook still kept."""
        raw = await self._redis.hgetall(log_key(tenant, agent_id))
        return {_text(k): json.loads(v) for k, v in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
