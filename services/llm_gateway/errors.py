"""Errors of the LLM gateway. `retryable` says whether the gateway itself may try the call again."""

from __future__ import annotations

import grpc

from services.common.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)


class ModelNotFound(NotFound):
    """A model id that maps to no configured model."""


class ProviderRateLimited(ResourceExhausted):
    """429 from the provider; `retry_after_s` is the provider's hint, when it gave one."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message, retryable=True)
        self.retry_after_s = retry_after_s


class ProviderUnavailable(Unavailable):
    """5xx, a dropped connection, or a refused one: worth another try."""


class ProviderRejected(InvalidArgument):
    """The provider refused the request itself (400, 422): retrying would get the same answer."""


class ProviderAuthFailed(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ProviderTimeout(DeadlineExceeded):
    """The call's deadline passed, or the stream went silent for too long. Never retried: no time is left."""

    retryable = False


class LocalModelBusy(ResourceExhausted):
    """The local model's queue is full. Not retried here: waiting inside the gateway would only grow the queue."""

    retryable = False


class ModelUnavailable(FailedPrecondition):
    """A model that cannot run here (its runtime or model package is not installed)."""


__all__ = [
    "LocalModelBusy",
    "ModelNotFound",
    "ModelUnavailable",
    "ProviderAuthFailed",
    "ProviderRateLimited",
    "ProviderRejected",
    "ProviderTimeout",
    "ProviderUnavailable",
]
