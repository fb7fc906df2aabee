"""gRPC's rich error model for refusals: a `google.rpc.Status` in the `grpc-status-details-bin` trailer, carrying
`google.rpc.RetryInfo` (when to try again) and `google.rpc.QuotaFailure` (which quota was hit), beside the plain
code and message every client reads.

    trailers = quota_trailers(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry_after_s=1.5,
                              subject="tenant:acme", description="concurrent_runs")
    raise SomeServiceError(message, trailing_metadata=trailers + (("ratelimit", '"runs";r=0;t=2'),))

    refusal(error.trailing_metadata())   # on the caller's side: Refusal(retry_after_s=1.5, violations=[...])

The interceptor (services/common/interceptors.py) ends the call with a ServiceError's `trailing_metadata`, and a
turn (services/common/turns/) carries them to its caller's AioRpcError the same way, so a caller reads them alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

DETAILS_KEY = "grpc-status-details-bin"  # where gRPC's rich error model travels (grpc_status's own key)

Trailers = tuple[tuple[str, "str | bytes"], ...]


def quota_trailers(code: grpc.StatusCode, message: str, *, retry_after_s: float, subject: str,
                   description: str) -> Trailers:
    """The `grpc-status-details-bin` trailer of a refusal: RetryInfo(retry_delay) and one QuotaFailure violation."""
    status = status_pb2.Status(code=code.value[0], message=message)
    retry = error_details_pb2.RetryInfo()
    retry.retry_delay.FromNanoseconds(max(0, round(retry_after_s * 1e9)))
    status.details.add().Pack(retry)
    quota = error_details_pb2.QuotaFailure(
        violations=[error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)])
    status.details.add().Pack(quota)
    return tuple(rpc_status.to_status(status).trailing_metadata)


@dataclass(frozen=True)
class Refusal:
    """What a refusal's rich status says: when to retry (None: not said) and the quotas hit (subject, description)."""

    retry_after_s: float | None = None
    violations: list[tuple[str, str]] = field(default_factory=list)


def refusal(trailing_metadata: Iterable[tuple[str, Any]] | None) -> Refusal:
    """Read a call's (or turn's) trailers: its RetryInfo and QuotaFailure, when it has them."""
    raw = next((value for key, value in trailing_metadata or () if key == DETAILS_KEY), None)
    if raw is None:
        return Refusal()
    status = status_pb2.Status.FromString(raw if isinstance(raw, bytes) else raw.encode("latin-1"))
    retry_after_s, violations = None, []
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            retry_after_s = info.retry_delay.ToNanoseconds() / 1e9
        elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            quota = error_details_pb2.QuotaFailure()
            detail.Unpack(quota)
            violations += [(v.subject, v.description) for v in quota.violations]
    return Refusal(retry_after_s, violations)
