"""An admission refusal of the orchestrator (docs/limits.md), read once and answered the same at every door.

The orchestrator refuses a run it will not admit (a tenant over its limit, a queue whose wait is over its bound)
with RESOURCE_EXHAUSTED, a message naming the tenant and the limit, rich status details holding
`google.rpc.RetryInfo` (when to try again) and `google.rpc.QuotaFailure` (subject `tenant:<id>`, description:
the limit's name), and trailing metadata `ratelimit-policy` and `ratelimit` with IETF RateLimit header values.
A run's turn carries all of it as its call would (services/common/turns/).

`refusal_of(exc)` reads that into a `Refusal`; `gateway.errors.from_rpc_error` attaches it to the GatewayError,
and each door renders it: HTTP 429 with `Retry-After` (whole seconds, rounded up) and the RateLimit headers in
the dialect's error shape (gateway/dialects/), a JSON-RPC error with the delay on the MCP and A2A doors
(`jsonrpc_data`). Each refusal answered is counted by tenant (`count`, /metrics; the run viewer reads it back
with `refused_by_tenant`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import grpc
from prometheus_client import Counter

from services.common import status_details

# The JSON-RPC error code of a refusal on the MCP and A2A doors: both protocols leave -32000..-32099 to the
# server; MCP reserves -32020 and up for its spec and its SDK takes -32000 and -32001, A2A takes -32001..-32009.
JSONRPC_REFUSED = -32010

REFUSALS = Counter("trellis_gateway_refusals_total",
                   "Requests the gateway answered with an admission refusal of the orchestrator (429 or the "
                   "protocol's error), by tenant, limit and door", ["tenant", "limit", "door"])

_SUBJECT_PREFIX = "tenant:"


@dataclass(frozen=True)
class Refusal:
    """What a refusal says: whose, which limit, when to try again, and the RateLimit header values."""

    tenant: str
    limit: str
    retry_after_s: float
    policy: str = ""  # RateLimit-Policy, as the orchestrator sent it
    state: str = ""  # RateLimit

    @property
    def retry_after(self) -> int:
        """Retry-After in whole seconds, rounded up: a client that waits that long is past the delay."""
        return max(0, math.ceil(self.retry_after_s))

    def headers(self) -> dict[str, str]:
        headers = {"Retry-After": str(self.retry_after)}
        if self.policy:
            headers["RateLimit-Policy"] = self.policy
        if self.state:
            headers["RateLimit"] = self.state
        return headers

    def fields(self) -> dict[str, object]:
        """The refusal as JSON fields, for an error body that has room for them."""
        return {"tenant": self.tenant, "limit": self.limit, "retry_after": self.retry_after,
                "retry_after_ms": math.ceil(self.retry_after_s * 1000)}


def refusal_of(exc: grpc.aio.AioRpcError) -> Refusal | None:
    """The refusal in a RESOURCE_EXHAUSTED that carries RetryInfo (services/common/status_details.py reads it);
    None for any other error (a message too large is RESOURCE_EXHAUSTED too, with no delay: nothing to retry)."""
    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    trailing = tuple(exc.trailing_metadata() or ())
    said = status_details.refusal(trailing)
    if said.retry_after_s is None:
        return None
    tenant, limit = next(((subject[len(_SUBJECT_PREFIX):], description) for subject, description in said.violations
                          if subject.startswith(_SUBJECT_PREFIX)), ("", ""))
    headers = dict(trailing)
    return Refusal(tenant=tenant, limit=limit, retry_after_s=said.retry_after_s,
                   policy=_text(headers.get("ratelimit-policy")), state=_text(headers.get("ratelimit")))


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""


def count(refusal: Refusal, door: str, tenant: str = "") -> None:
    """One refusal answered at `door` (a dialect's name, "mcp", "a2a"), counted under the refusal's tenant
    (else `tenant`, the request's)."""
    REFUSALS.labels(refusal.tenant or tenant, refusal.limit or "unknown", door).inc()


def refused_by_tenant(tenant: str) -> dict[str, int]:
    """This gateway process's refusals of `tenant` so far, by limit (every door together)."""
    totals: dict[str, int] = {}
    for metric in REFUSALS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels["tenant"] == tenant:
                limit = sample.labels["limit"]
                totals[limit] = totals.get(limit, 0) + int(sample.value)
    return totals


def jsonrpc_data(refusal: Refusal) -> dict[str, object]:
    """The `data` of a refusal's JSON-RPC error (MCP): the delay in seconds (rounded up) and milliseconds,
    whose limit, and the RateLimit header values."""
    data = refusal.fields()
    if refusal.policy:
        data["ratelimit_policy"] = refusal.policy
    if refusal.state:
        data["ratelimit"] = refusal.state
    return data
