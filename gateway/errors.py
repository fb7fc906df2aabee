"""One table from gRPC status to each dialect's error.

Handlers raise `GatewayError` (bad input at the edge) or let `grpc.aio.AioRpcError` from the orchestrator
propagate; `gateway.endpoint` renders either in the dialect of the route (`Dialect.error_body`, in
gateway/dialects/): RAGFlow answers HTTP 200 with the RetCode below in the body, OpenAI and the standard
envelope the HTTP status below. An admission refusal (RESOURCE_EXHAUSTED with a retry delay) is 429 in every
dialect, with Retry-After (gateway/refusal.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from gateway.refusal import Refusal, refusal_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorKind:
    http_status: int
    ragflow_code: int  # RAGFlow's RetCode: 101 argument, 102 data, 103 operating, 108 permission, 100/500 server
    openai_type: str


_TABLE: dict[grpc.StatusCode, ErrorKind] = {
    grpc.StatusCode.INVALID_ARGUMENT: ErrorKind(400, 101, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: ErrorKind(400, 103, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: ErrorKind(400, 101, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: ErrorKind(401, 102, "invalid_request_error"),
    grpc.StatusCode.PERMISSION_DENIED: ErrorKind(403, 108, "permission_error"),
    grpc.StatusCode.NOT_FOUND: ErrorKind(404, 102, "invalid_request_error"),
    grpc.StatusCode.ALREADY_EXISTS: ErrorKind(409, 102, "invalid_request_error"),
    grpc.StatusCode.ABORTED: ErrorKind(409, 103, "invalid_request_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ErrorKind(429, 100, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: ErrorKind(499, 100, "cancelled"),
    grpc.StatusCode.UNIMPLEMENTED: ErrorKind(501, 100, "not_implemented"),
    grpc.StatusCode.UNAVAILABLE: ErrorKind(503, 105, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorKind(504, 100, "timeout"),
}
_SERVER = ErrorKind(500, 500, "server_error")


def kind_of(code: grpc.StatusCode) -> ErrorKind:
    return _TABLE.get(code, _SERVER)


class GatewayError(Exception):
    """An error the client is meant to read. `code` uses the gRPC vocabulary so one table serves all."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT,
        param: str | None = None,
        http_status: int | None = None,
        openai_code: str | None = None,
        ragflow_code: int | None = None,
        refusal: Refusal | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        kind = kind_of(code)
        self.http_status = http_status or kind.http_status
        self.ragflow_code = ragflow_code if ragflow_code is not None else kind.ragflow_code
        self.openai_type = kind.openai_type
        self.openai_code = openai_code
        self.refusal = refusal  # an admission refusal: 429 with Retry-After at every door (gateway/refusal.py)


def from_rpc_error(exc: grpc.aio.AioRpcError, what: str = "orchestrator") -> GatewayError:
    """The orchestrator's own message for its errors; a plain sentence when the hop itself failed."""
    code = exc.code()
    details = exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        log.warning("%s unavailable: %s", what, details)
        return GatewayError(f"the {what} is unavailable; try again shortly", code=code)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return GatewayError(f"the {what} did not answer in time", code=code)
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS):
        log.error("%s failed with %s: %s", what, code.name, details)
        return GatewayError(details or f"internal error in the {what}", code=code)
    return GatewayError(details or code.name.lower(), code=code, refusal=refusal_of(exc))
