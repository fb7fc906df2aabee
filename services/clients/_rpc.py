"""What every peer client shares: the channel, deadlines, the one translation of gRPC failures into typed
errors, and the one retry rule. No service catches `grpc.aio.AioRpcError` from a peer itself: this does.

Errors: a failed call raises the `services.common.errors` class of its status code (`NotFound`,
`InvalidArgument`, `Unavailable`...), so callers catch types, never codes. The message is the peer's own,
except when the peer could not be reached (UNAVAILABLE, CANCELLED), which says which peer:
"the retrieval service is unavailable: ...". `retryable` comes with the class (UNAVAILABLE,
RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED are), for callers that keep their own retry budget.

Retries (`RetryPolicy`): a call is tried again only when it failed with UNAVAILABLE while the channel was
not connected, i.e. the request never reached the peer: the peer restarted, a pod rolled over, the
connection dropped. Between tries the client waits for the channel to connect again, at most the backoff
(0.25 s, doubling, 4 tries in all) and never past the call's deadline. A peer that answered UNAVAILABLE
itself (the LLM gateway after its own provider retries) is not asked again: its answer stands. A stream
is tried again only before its first message, so nothing a caller has already seen is repeated. A turn on a
shared stream (services/common/turns/) is a call here like any other: the same rule, no second one.

Deadlines: each client has a default `timeout_s` per call, and a call may pass its own; retries and the
waits between them spend the same deadline, they never extend it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, ClassVar, Self, TypeVar

import grpc

from services.common.channels import open_channel, outbound_metadata
from services.common.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
    Unavailable,
    Unimplemented,
)

R = TypeVar("R")

_ERRORS: dict[grpc.StatusCode, type[ServiceError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.CANCELLED: Cancelled,
}
_UNREACHED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)  # the service went away, not the request


def peer_error(exc: grpc.aio.AioRpcError, peer: str) -> ServiceError:
    """The typed error for a failed call to `peer` (a name for messages: "llm_gateway", "sandbox")."""
    return status_error(exc.code(), exc.details(), peer)


def status_error(code: grpc.StatusCode, details: str | None, peer: str) -> ServiceError:
    """The typed error for a call to `peer` that ended with `code` and `details`."""
    message = details or code.name
    if code in _UNREACHED:
        message = f"the {peer} is unavailable: {message}"
    return _ERRORS.get(code, ServiceError)(message, code=code)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a call that never reached its peer is tried, and how long to wait for the peer in between."""

    attempts: int = 4  # tries in all, the first one included
    backoff_s: float = 0.25  # the wait after the first failure; it doubles each time
    max_backoff_s: float = 2.0

    def backoff(self, attempt: int) -> float:
        return min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)


class Peer:
    """A peer service behind one channel. Subclasses add the typed methods and name the peer."""

    peer: ClassVar[str]  # the name errors use
    stub: ClassVar[Callable[[grpc.aio.Channel], Any]]  # the generated `<Service>Stub`

    def __init__(self, channel: grpc.aio.Channel, *, timeout_s: float | None = None,
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.channel = channel
        self._stub = self.stub(channel)
        self.timeout_s = timeout_s
        self.retry = retry

    @classmethod
    def connect(cls, address: str, **kwargs: Any) -> Self:
        """A client on a new channel to `address` (`host:port`); it connects lazily, on the first call."""
        return cls(open_channel(address), **kwargs)

    async def close(self) -> None:
        await self.channel.close()

    def status_error(self, code: grpc.StatusCode, details: str | None) -> ServiceError:
        return status_error(code, details, self.peer)

    def _deadline(self, timeout_s: float | None) -> float | None:
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        return None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())

    async def _again(self, exc: grpc.aio.AioRpcError, attempt: int, deadline: float | None) -> bool:
        """After a failed try: True when the request never reached the peer and tries and time are left;
        then the peer has had up to the backoff to come back."""
        if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt >= self.retry.attempts:
            return False
        if self.channel.get_state() == grpc.ChannelConnectivity.READY:
            return False  # connected: the peer itself answered UNAVAILABLE
        left = self._left(deadline)
        if left is not None and left <= 0:
            return False
        wait = self.retry.backoff(attempt) if left is None else min(self.retry.backoff(attempt), left)
        try:
            await asyncio.wait_for(self.channel.channel_ready(), wait)
        except TimeoutError:
            pass  # not back yet: the next try fails fast and waits longer
        return True

    async def _unary(self, method: Callable[..., Any], request: Any, timeout_s: float | None = None) -> Any:
        """`method(request)` with the deadline and the retry rule; a failure raises its typed error."""
        deadline = self._deadline(timeout_s)
        attempt = 1
        while True:
            try:
                call = method(request, timeout=self._left(deadline), metadata=outbound_metadata())
                return await call
            except grpc.aio.AioRpcError as exc:
                if not await self._again(exc, attempt, deadline):
                    raise peer_error(exc, self.peer) from None
            attempt += 1

    async def _stream(self, method: Callable[..., Any], request: Any, convert: Callable[[Any], R],
                      timeout_s: float | None = None) -> AsyncIterator[R]:
        """`convert(message)` for each message `method(request)` streams. Closing the iterator (break,
        cancel) cancels the call, and with it the peer's work."""
        deadline = self._deadline(timeout_s)
        attempt = 1
        while True:
            call = method(request, timeout=self._left(deadline), metadata=outbound_metadata())
            started = False
            try:
                async for message in call:
                    started = True
                    yield convert(message)
                return
            except grpc.aio.AioRpcError as exc:
                if started or not await self._again(exc, attempt, deadline):
                    raise peer_error(exc, self.peer) from None
            finally:
                call.cancel()  # a no-op once the call has ended
            attempt += 1
