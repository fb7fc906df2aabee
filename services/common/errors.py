"""Typed errors: business code raises these; one interceptor maps them to gRPC status."""

from __future__ import annotations

from typing import Any

import grpc


class ServiceError(Exception):
    """An error meant for the caller: its message is shown to clients as is."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
        trailing_metadata: tuple[tuple[str, str | bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.details = details or {}
        # What the caller gets besides code and message, in the call's trailing metadata (and a turn's end,
        # services/common/turns/): rich status details (`grpc-status-details-bin`, grpc_status.rpc_status)
        # and headers such as `ratelimit`. One value per key.
        self.trailing_metadata = trailing_metadata


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ServiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class PermissionDenied(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retryable = True


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retryable = True


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE
    retryable = True


class Unimplemented(ServiceError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Cancelled(ServiceError):
    code = grpc.StatusCode.CANCELLED

