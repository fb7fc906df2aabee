"""What every peer client shares: the channel, deadlines, the one translation of gRPC failures into typed
errors, and the one retry rule. No service catches `grpc.aio.AioRpcError` from a peer itself: this does.

Errors: a failed call raises the `services.common.errors` class of its status code (`NotFound`,
`InvalidArgument`, `Unavailable`...), so callers catch types, never codes. The message is the peer's own,
except when the peer could not be reached (UNAVAILABLE, CANCELLED), which says which peer:
"the retrieval service is unavailable: ...". `retryable` comes with the class (UNAVAILABLE,
RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED are), for callers that keep their own retry budget.

Retries (`RetryPolicy`): a call waits for a peer that is away (restarting, a pod rolling over, the connection
dropped), and is tried again when it failed because it lost its peer; nothing else is asked again.
- Before each try the channel must be connected. When it is not, the call waits for it to connect again (grpc
  reconnects with its own backoff, at most 1 s apart: services/common/channels.py) within the retry budget,
  `TRELLIS_PEER_RETRY_S` (default 20 s: longer than a restart under `trellis up`), counted from when the call
  first found its peer away, and never past the call's own deadline. Once the budget is spent the call is made
  anyway and fails with grpc's words, naming the peer: "the sandbox is unavailable: connections to all backends
  failing; ... (waited 20.0 s for it to come back)"; a deadline that passes first fails it the same way.
- A try that failed with UNAVAILABLE (or grpc's own INTERNAL for a stream cut while it wrote) lost its peer
  when the channel is no longer connected, or stops being connected within `LOSS_GRACE_S` (a connection's loss
  can fail its calls a moment before the channel's state says so). Then, after a short pause (0.05 s, doubling up to 1 s), the call waits as above and is tried again.
  A peer that answered UNAVAILABLE itself (the channel stays connected: the LLM gateway after its own provider
  retries) is not asked again: its answer stands.
- A stream is tried again only before its first message, so nothing a caller has already seen is repeated. A
  call whose work has side effects (`once=True`: the sandbox's Execute) is never sent twice, since it may have
  started; it waits for its peer only before it leaves (grpc's wait_for_ready, for a connection lost just
  before).
A turn on a shared stream (services/common/turns/) is a call here like any other: the same rule, no second one.
A peer that is up but still starting does not answer UNAVAILABLE, which would stand: its calls wait for it (the
sandbox, services/sandbox/server.py).

Deadlines: each client has a default `timeout_s` per call, and a call may pass its own; retries and the
waits between them spend the same deadline, they never extend it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, ClassVar, Self, TypeVar

import grpc

from services.common.channels import open_channel, outbound_metadata
from services.common.config import env_float
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


PEER_RETRY_ENV = "TRELLIS_PEER_RETRY_S"
DEFAULT_PEER_RETRY_S = 20.0
LOSS_GRACE_S = 0.5  # how long a connected channel may take to notice the loss of the connection a try failed on
# A call that is tried once waits in grpc for a connection (wait_for_ready) instead of failing when the one it was
# made for went away before it left (the channel's state lags its loss): it was not sent, and nothing else would
# send it. Its deadline bounds that wait; once its budget is spent it is made as any call is (it fails at once).
_CONNECTED_ONLY: dict[str, Any] = {"wait_for_ready": True}
_ANY: dict[str, Any] = {}
_READY = grpc.ChannelConnectivity.READY
_SHUTDOWN = grpc.ChannelConnectivity.SHUTDOWN


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a call waits, in all, for a peer that went away to come back (module docstring), and the pause
    before each try after a failed one: a peer that accepts connections and drops them at once is not hammered."""

    budget_s: float = DEFAULT_PEER_RETRY_S
    backoff_s: float = 0.05  # the pause after the first failed try; it doubles with each one
    max_backoff_s: float = 1.0

    @classmethod
    def from_env(cls) -> "RetryPolicy":
        """`TRELLIS_PEER_RETRY_S` (seconds; default 20); 0 waits for no peer (one try, as grpc makes it)."""
        budget_s = env_float(PEER_RETRY_ENV, DEFAULT_PEER_RETRY_S)
        if budget_s < 0:
            raise SystemExit(f"configuration error: {PEER_RETRY_ENV}={budget_s} is negative")
        return cls(budget_s)

    def backoff(self, failed: int) -> float:
        return min(self.backoff_s * 2 ** (failed - 1), self.max_backoff_s)


def _core_lost_status(exc: grpc.aio.AioRpcError) -> bool:
    """grpc's own INTERNAL for a stream whose server went away while the client was writing to it (the turns'
    streams): the client's core lost the status (grpc.aio's `set_internal_error`). Not the peer's answer: lost
    as UNAVAILABLE is, when the channel lost its connection too."""
    return exc.code() == grpc.StatusCode.INTERNAL and exc.details() == "Internal error from Core"


class _Patience:
    """One call's wait for its peer: its deadline, and its retry budget from when it first found the peer away."""

    __slots__ = ("deadline", "since", "until", "last", "failed")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.failed = 0  # tries that failed
        self.since: float | None = None  # when the call first found its peer away
        self.until: float | None = None  # when its budget is spent
        self.last: grpc.aio.AioRpcError | None = None  # the last try's failure

    def end(self) -> float | None:
        """When the waiting stops: the budget's end or the deadline, the sooner."""
        if self.until is None or self.deadline is None:
            return self.until if self.deadline is None else self.deadline
        return min(self.until, self.deadline)

    def spent(self, now: float) -> bool:
        end = self.end()
        return end is not None and now >= end

    def patient(self) -> bool:
        """Whether the budget is left (or not started: the peer was never found away)."""
        return self.until is None or asyncio.get_running_loop().time() < self.until

    def waited(self) -> str:
        return f"waited {asyncio.get_running_loop().time() - (self.since or 0.0):.1f} s for it to come back"


class Peer:
    """A peer service behind one channel. Subclasses add the typed methods and name the peer."""

    peer: ClassVar[str]  # the name errors use
    stub: ClassVar[Callable[[grpc.aio.Channel], Any]]  # the generated `<Service>Stub`

    def __init__(self, channel: grpc.aio.Channel, *, timeout_s: float | None = None,
                 retry: RetryPolicy | None = None) -> None:
        self.channel = channel
        self._stub = self.stub(channel)
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy.from_env()

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

    async def _peer_back(self, wait: _Patience) -> None:
        """Before a try, the channel not connected: waits for it to connect (grpc reconnects with its backoff)
        while the budget and the deadline last. Once the budget is spent the try is made anyway (a peer still
        away fails it at once, in grpc's words); a deadline that passed meanwhile raises UNAVAILABLE naming the
        peer (DEADLINE_EXCEEDED would not say which peer was away)."""
        channel = self.channel
        if channel.get_state() is _SHUTDOWN:
            return  # closed: the try says so
        loop = asyncio.get_running_loop()
        if wait.until is None:
            wait.since = loop.time()
            wait.until = wait.since + self.retry.budget_s
        end = wait.end()
        try:
            async with asyncio.timeout_at(end):
                await channel.channel_ready()
            return
        except TimeoutError:
            pass
        if wait.deadline is not None and loop.time() >= wait.deadline:
            details = wait.last.details() if wait.last is not None else "not connected"
            raise self.status_error(grpc.StatusCode.UNAVAILABLE, f"{details} ({wait.waited()})") from None

    async def _again(self, exc: grpc.aio.AioRpcError, wait: _Patience) -> bool:
        """After a failed try (one that may be sent again: not `once`, no message streamed yet): True when it
        never reached its peer (UNAVAILABLE, and the channel lost its connection) and budget and deadline are
        left; then the backoff has passed."""
        wait.last = exc
        wait.failed += 1
        if exc.code() != grpc.StatusCode.UNAVAILABLE and not _core_lost_status(exc):
            return False
        if self.channel.get_state() is _READY and not await self._losing_connection(wait):
            return False  # the peer's own answer
        now = asyncio.get_running_loop().time()
        if wait.spent(now):
            return False
        end = wait.end()
        pause = self.retry.backoff(wait.failed)
        await asyncio.sleep(pause if end is None else min(pause, end - now))
        return True

    async def _losing_connection(self, wait: _Patience) -> bool:
        """Whether the channel, still connected when a try failed with UNAVAILABLE, loses its connection within
        `LOSS_GRACE_S`: a connection's loss can fail its calls a moment before the channel's state says so (and a
        server that stops answers its calls before it closes). A peer's own answer waits that long, once."""
        end = wait.end()
        grace = LOSS_GRACE_S if end is None else min(LOSS_GRACE_S, end - asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(max(grace, 0.0)):
                await self.channel.wait_for_state_change(_READY)
        except TimeoutError:
            return False
        return True

    def _failure(self, exc: grpc.aio.AioRpcError, wait: _Patience) -> ServiceError:
        """The typed error of a call's last try; one that waited for its peer in vain says how long."""
        if self.channel.get_state() is _READY:
            return peer_error(exc, self.peer)
        if _core_lost_status(exc):  # the peer went away: say so, and which
            return self.status_error(grpc.StatusCode.UNAVAILABLE, f"the connection was lost ({exc.details()})")
        if wait.since is None or exc.code() != grpc.StatusCode.UNAVAILABLE:
            return peer_error(exc, self.peer)
        return self.status_error(exc.code(), f"{exc.details() or exc.code().name} ({wait.waited()})")

    async def _unary(self, method: Callable[..., Any], request: Any, timeout_s: float | None = None, *,
                     once: bool = False) -> Any:
        """`method(request)` with the deadline and the retry rule; a failure raises its typed error. `once`: the
        call has side effects, and is not sent a second time."""
        wait = _Patience(self._deadline(timeout_s))
        while True:
            if self.channel.get_state(try_to_connect=True) is not _READY:
                await self._peer_back(wait)
            try:
                call = method(request, timeout=self._left(wait.deadline), metadata=outbound_metadata(),
                              **(_CONNECTED_ONLY if once and wait.patient() else _ANY))
                return await call
            except grpc.aio.AioRpcError as exc:
                if once or not await self._again(exc, wait):
                    raise self._failure(exc, wait) from None

    async def _stream(self, method: Callable[..., Any], request: Any, convert: Callable[[Any], R],
                      timeout_s: float | None = None, *, once: bool = False) -> AsyncIterator[R]:
        """`convert(message)` for each message `method(request)` streams. Closing the iterator (break,
        cancel) cancels the call, and with it the peer's work. `once`: as for `_unary`."""
        wait = _Patience(self._deadline(timeout_s))
        while True:
            if self.channel.get_state(try_to_connect=True) is not _READY:
                await self._peer_back(wait)
            call = method(request, timeout=self._left(wait.deadline), metadata=outbound_metadata(),
                          **(_CONNECTED_ONLY if once and wait.patient() else _ANY))
            started = False
            try:
                async for message in call:
                    started = True
                    yield convert(message)
                return
            except grpc.aio.AioRpcError as exc:
                if started or once or not await self._again(exc, wait):
                    raise self._failure(exc, wait) from None
            finally:
                call.cancel()  # a no-op once the call has ended
