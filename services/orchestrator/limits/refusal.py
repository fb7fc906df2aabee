"""What a refused run or stream is told: RESOURCE_EXHAUSTED naming the tenant and the limit, gRPC's rich status
details (RetryInfo, QuotaFailure) and the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers) as the
trailers `ratelimit-policy` and `ratelimit`, for the gateway to copy as headers (docs/limits.md has the contract).
"""

from __future__ import annotations

import math

import grpc

from services.common.errors import ResourceExhausted
from services.common.status_details import quota_trailers
from services.orchestrator.limits.policy import (
    CONCURRENT_RUNS,
    HELD_STREAMS,
    RUNS_PER_SECOND,
    TOKENS_PER_MINUTE,
    Scope,
)

CAPACITY = "capacity"  # the replica's fair queue is full: not a tenant's limit, the machine's

# How each limit reads in a refusal's message, and its RateLimit-Policy quota unit (None: requests).
_WORDING = {CONCURRENT_RUNS: "concurrent runs", RUNS_PER_SECOND: "runs per second",
            TOKENS_PER_MINUTE: "LLM tokens per minute", HELD_STREAMS: "held streams"}
_UNITS = {CONCURRENT_RUNS: "concurrent-requests", HELD_STREAMS: "concurrent-requests", TOKENS_PER_MINUTE: "tokens",
          CAPACITY: "concurrent-requests"}


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def ratelimit_fields(limit: str, quota: float, window_s: int | None, retry_after_s: float) -> tuple[str, str]:
    """(RateLimit-Policy, RateLimit) field values of one policy named after the limit, none of it left."""
    policy = f'"{limit}";q={math.ceil(quota)}'
    if window_s:
        policy += f";w={window_s}"
    if limit in _UNITS:
        policy += f';qu="{_UNITS[limit]}"'
    return policy, f'"{limit}";r=0;t={max(0, math.ceil(retry_after_s))}'


class LimitExceeded(ResourceExhausted):
    """A run or stream refused because its tenant (or its API key, or its agent) is at one of its limits.
    Nothing was written for it; the caller may retry after `retry_after_s`."""

    def __init__(self, scope: Scope, limit: str, quota: float, retry_after_s: float, *, window_s: int | None = None,
                 window_quota: int | None = None, detail: str = "") -> None:
        """`quota`: the limit as configured; `window_quota` and `window_s`: what it allows per window, when it is
        enforced over one (the RateLimit-Policy's q and w)."""
        message = (f"{scope.describe()} is at its limit of {_number(quota)} {_WORDING[limit]}{detail}; "
                   f"retry after {retry_after_s:.2f} s")
        policy, current = ratelimit_fields(limit, quota if window_quota is None else window_quota, window_s,
                                           retry_after_s)
        trailers = quota_trailers(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry_after_s=retry_after_s,
                                  subject=f"tenant:{scope.tenant}", description=limit)
        super().__init__(message, details={"tenant": scope.tenant, "limit": limit, "retry_after_s": retry_after_s})
        # what the call ends with besides its status (the interceptor, a turn's end: services/common/)
        self.trailing_metadata = (*trailers, ("ratelimit-policy", policy), ("ratelimit", current))
        self.tenant = scope.tenant
        self.limit = limit
        self.retry_after_s = retry_after_s


class Overloaded(ResourceExhausted):
    """A run refused because this replica runs its capacity and the run's wait would be longer than the bound
    (the fair queue's QueueFull, with the same rich details as a limit's refusal)."""

    def __init__(self, tenant: str, message: str, retry_after_s: float, capacity: int) -> None:
        policy, current = ratelimit_fields(CAPACITY, capacity, None, retry_after_s)
        trailers = quota_trailers(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry_after_s=retry_after_s,
                                  subject=f"tenant:{tenant}", description=CAPACITY)
        super().__init__(message, details={"tenant": tenant, "limit": CAPACITY, "retry_after_s": retry_after_s})
        self.trailing_metadata = (*trailers, ("ratelimit-policy", policy), ("ratelimit", current))
        self.tenant = tenant
        self.limit = CAPACITY
        self.retry_after_s = retry_after_s
