"""The client side of turns on shared streams (docs/transport.md): how a typed client reaches a peer's method
without a gRPC call per call of it (the orchestrator's LLM turns, services/clients/llm.py; the gateway's runs,
gateway/orchestrator.py).

`TurnClient.call(request, timeout=, metadata=)` is used as a stub's method is, and gives a `TurnCall` used as the
call would be (`async for`, `read()`, `await`, `cancel()`), so a typed client has one code path and its deadline,
error and retry rules apply to a turn as to a call. A turn is opened on one of the client's streams by id, with
its deadline and the metadata its call would carry; its messages come back through the stream's one reader.
Opens and cancels that queue up while a message is written go out together in the next. A failed turn raises
the plain `grpc.aio.AioRpcError` its call would have raised.

A turn no peer started (a peer that shuts down refused it, `again`, or ended its stream first) is opened again on
a new stream, which reaches a replica that serves, as grpc itself retries a call no server saw ("transparent
retry"): nothing of it ran, so this is not the caller's retry (services/clients/_rpc.py has the one rule), and it
is bounded by the turn's deadline and `REOPENS`. A turn whose caller stops reading buffers its chunks here (one
turn's output at most): the stream's reader never waits for a caller.

Replicas: one stream per replica of the peer (its lanes, lanes.py), opened one after the other, so round_robin
puts them on consecutive replicas; turns take the lanes in turn. A stream takes new turns for `ROTATE_AFTER_S` or
`ROTATE_AFTER_TURNS`; then all lanes are opened again (a replica that joined gets its share), and a retired stream
closes once its last turn has ended. A peer without the turn service fails each turn with UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator

import grpc

from services.common import channels
from services.common.channels import MAX_MESSAGE_BYTES
from services.common.inbox import Inbox
from services.common.turns.lanes import listed_replicas, resolved_replicas

ROTATE_AFTER_S = 30.0
ROTATE_AFTER_TURNS = 1000
REOPENS = 3  # how often a turn no peer started is opened again on a new stream


def _failure(code: grpc.StatusCode, details: str, trailing: Any = None) -> grpc.aio.AioRpcError:
    """The error its call would raise; `trailing`, a turn end's `trailing_metadata` (rich status details
    included, so `grpc_status.rpc_status.from_call` reads a turn's error as a call's)."""
    metadata = grpc.aio.Metadata(*((key, value if key.endswith("-bin") else value.decode())
                                   for key, value in (trailing or {}).items()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), metadata, details)


def _again(error: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """The same error, as a new exception: a turn keeps one for its further reads, and raises copies of it. (One
    kept and raised would hold, in its traceback, the frames that hold the turn: a cycle.)"""
    return grpc.aio.AioRpcError(error.code(), error.initial_metadata(), error.trailing_metadata(), error.details())


_CODES = {code.value[0]: code for code in grpc.StatusCode}


class _Expired:  # put in a turn's queue when its deadline passed without the peer's word
    pass


_EXPIRED = _Expired()


class _Cancelled:  # put in a turn's queue when its caller cancelled it: a read still waiting wakes and fails
    pass


@dataclass(slots=True)
class _Gone:
    """Put in a turn's queue when its stream ended: `error`, what the turn fails with; `unstarted`, the stream
    ended without an error of its own while the turn waited, so no peer started it."""

    error: grpc.aio.AioRpcError
    unstarted: bool = False


@dataclass(frozen=True, slots=True)
class ClientTurnTypes:
    """A service's message classes for its turns, as the client sends and reads them: `request(open=[...],
    cancel=[...])`, `turn(id=, request=, timeout_s=, metadata=, **fields)`, and `message`, what the responses
    carry (services/common/turns/server.py)."""

    request: type
    turn: type
    message: type


class _TurnStream:
    """One call carrying turns: its turns by id, the opens and cancels to send, its reader."""

    def __init__(self, call: Any, types: ClientTurnTypes, peer: str, on_end: Callable[["_TurnStream"], None]) -> None:
        self.call = call
        self._on_end = on_end
        self.types = types
        self.peer = peer
        self.turns: dict[int, Inbox] = {}
        self.failure: grpc.aio.AioRpcError | None = None  # once the call has failed or ended
        self.opened = 0
        self.retired = False
        self._born = time.monotonic()
        self._opens: list[tuple[Any, int]] = []  # turns to open, with their size
        self._cancels: list[int] = []
        self._writing = False
        self._reader = asyncio.ensure_future(self._read())

    def accepting(self) -> bool:
        if self.failure is None and not self.retired and (
                self.opened >= ROTATE_AFTER_TURNS or time.monotonic() - self._born >= ROTATE_AFTER_S):
            self.retire()
        return self.failure is None and not self.retired

    def retire(self) -> None:
        """Take no more turns; closed once its last turn has ended."""
        self.retired = True
        self._close_if_idle()

    def open(self, turn_id: int, request: Any, timeout_s: float | None, metadata: Any, fields: dict[str, Any],
             queue: Inbox) -> None:
        """Sends the turn (with what else queues up meanwhile); its messages go to `queue`. A turn larger than a
        message may be fails here, as its call would, and opens nothing."""
        turn = self.types.turn(id=turn_id, request=request, timeout_s=timeout_s or 0.0, metadata=dict(metadata or ()),
                               **fields)
        size = turn.ByteSize()
        if size > MAX_MESSAGE_BYTES:
            raise _failure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"a request of {size} bytes is larger than the {MAX_MESSAGE_BYTES} a message may have")
        self.turns[turn_id] = queue
        self.opened += 1
        self._opens.append((turn, size))
        self._flush()

    def close_turn(self, turn_id: int, *, cancel: bool) -> None:
        if self.turns.pop(turn_id, None) is not None and cancel and self.failure is None:
            unsent = [queued for queued in self._opens if queued[0].id == turn_id]
            if unsent:  # still queued behind a write: it never leaves
                self._opens.remove(unsent[0])
            else:
                self._cancels.append(turn_id)
                self._flush()
        self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self.retired and not self.turns and self.failure is None and not self._writing:
            self.failure = self._ended()  # no turn will come here again
            asyncio.ensure_future(self._done_writing())

    def _ended(self) -> grpc.aio.AioRpcError:
        return _failure(grpc.StatusCode.UNAVAILABLE, f"the {self.peer} ended the stream of turns")

    async def _done_writing(self) -> None:
        try:
            await self.call.done_writing()
        except grpc.aio.AioRpcError:
            pass  # the reader has the call's status

    def _flush(self) -> None:
        if not self._writing and (self._opens or self._cancels):
            self._writing = True
            asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        """Whatever queued up while the previous message was written, in one message."""
        try:
            while self._opens or self._cancels:
                queued, self._opens = self._opens, []
                cancels, self._cancels = self._cancels, []
                batches = channels.in_batches([turn for turn, _ in queued], [size for _, size in queued]) or [[]]
                for i, opens in enumerate(batches):
                    await self.call.write(self.types.request(open=opens, cancel=cancels if i == 0 else []))
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            pass  # the call failed or was closed: the reader tells every turn
        finally:
            self._writing = False
            self._close_if_idle()

    async def _read(self) -> None:
        gone: _Gone | None = None
        try:
            async for response in self.call:
                for message in response.messages:
                    queue = self.turns.get(message.id)
                    if queue is not None:
                        queue.put_nowait(message)
            gone = _Gone(self._ended(), unstarted=True)  # the peer ended it while a turn waited: never started
        except grpc.aio.AioRpcError as exc:
            gone = _Gone(exc)
        except asyncio.CancelledError:  # the client closed
            gone = _Gone(_failure(grpc.StatusCode.CANCELLED, f"the client of the {self.peer} was closed"))
        finally:  # every turn still here hears how the stream ended, whatever ended it
            gone = gone or _Gone(_failure(grpc.StatusCode.UNKNOWN, "the stream of turns broke"))
            if self.failure is None:
                self.failure = gone.error
            for queue in self.turns.values():
                queue.put_nowait(gone)
            self._on_end(self)

    def cancel(self) -> None:
        self.call.cancel()


class TurnCall:
    """One turn, used as the call it stands for: `async for chunk in call`, `await call.read()` (`grpc.aio.EOF`
    after the last chunk), or `await call` for a whole turn's one chunk; `cancel()` stops it at the peer (a no-op
    once it ended). A failure raises the `grpc.aio.AioRpcError` its call would have raised. Nothing is sent
    before the first read, as nothing of a call is before its first await."""

    # Slots, and the request let go of once a chunk came (it is never sent again then): a held stream keeps its
    # turn for as long as it lasts, in the gateway and in the orchestrator (services/common/inbox.py says why).
    __slots__ = ("_client", "_request", "_timeout", "_metadata", "_fields", "_queue", "_stream", "_turn_id",
                 "_deadline", "_timer", "_opens", "_seen", "_outcome")

    def __init__(self, client: "TurnClient", request: Any, timeout: float | None, metadata: Any,
                 fields: dict[str, Any]) -> None:
        self._client = client
        self._request = request
        self._timeout = timeout
        self._metadata = metadata
        self._fields = fields
        self._queue = Inbox()  # its messages (an asyncio.Queue is 3 KB, per held stream: services/common/inbox.py)
        self._stream: _TurnStream | None = None
        self._turn_id = 0
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._opens = 0
        self._seen = False  # a chunk came: never opened again
        self._outcome: Any = None  # once ended: grpc.aio.EOF, or the error every further read raises

    def __aiter__(self) -> "TurnCall":
        return self

    async def __anext__(self) -> Any:
        chunk = await self.read()
        if chunk is grpc.aio.EOF:
            raise StopAsyncIteration
        return chunk

    def __await__(self) -> Generator[Any, None, Any]:
        return self._whole().__await__()

    async def _whole(self) -> Any:
        try:
            chunk = await self.read()
        finally:
            self.cancel()  # a no-op when its end came with its chunk; a caller gone away cancels it
        if chunk is grpc.aio.EOF:
            raise _failure(grpc.StatusCode.INTERNAL, f"the {self._client.peer} ended a whole turn without its message")
        return chunk

    async def read(self) -> Any:
        if self._outcome is grpc.aio.EOF:
            return grpc.aio.EOF
        if self._outcome is not None:
            raise _again(self._outcome)
        message_type = self._client.types.message
        try:
            if self._stream is None:
                self._open()
            while True:
                item = await self._queue.get()
                if item.__class__ is message_type:
                    if item.HasField("chunk"):
                        if not self._seen:
                            self._seen = True
                            self._request = self._metadata = self._fields = None
                        return item.chunk
                    end = item.end
                    if end.again:  # that replica shuts down and never started it: a new stream
                        self._stream.retire()
                        if self._reopen():
                            continue
                        raise _failure(grpc.StatusCode.UNAVAILABLE, end.message)
                    self._finish(cancel=False)
                    if end.code:
                        raise _failure(_CODES.get(end.code, grpc.StatusCode.UNKNOWN), end.message,
                                       end.trailing_metadata)
                    self._outcome = grpc.aio.EOF
                    return grpc.aio.EOF
                if item.__class__ is _Expired:
                    self._finish(cancel=True)
                    raise _failure(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                if item.__class__ is _Cancelled:
                    raise _again(self._outcome)
                if item.unstarted and self._reopen():  # the stream ended while the turn waited: no peer started it
                    continue
                raise _failure(item.error.code(), item.error.details() or "")  # each turn its own exception
        except grpc.aio.AioRpcError as exc:
            self._outcome = _again(exc)
            self._finish(cancel=False)
            raise

    def ready(self) -> bool:
        """Whether `read()` answers at once: its next chunk, its end or its failure is here already."""
        return self._outcome is not None or not self._queue.empty()

    def cancel(self) -> bool:  # False once it has ended
        if self._outcome is not None:
            return False
        self._outcome = _failure(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        self._finish(cancel=not _ended_unread(self._queue, self._client.types.message))
        self._queue.put_nowait(_Cancelled())
        return True

    def _open(self) -> None:
        client = self._client
        if client.closed:
            raise _failure(grpc.StatusCode.CANCELLED, f"the client of the {client.peer} was closed")
        loop = asyncio.get_running_loop()
        if self._opens == 0 and self._timeout is not None:
            self._deadline = loop.time() + self._timeout
            if self._timeout > 0:  # (a timeout of 0 would be none at all to the peer: not sent)
                self._timer = loop.call_at(self._deadline, self._queue.put_nowait, _EXPIRED)
        left = None if self._deadline is None else self._deadline - loop.time()
        if left is not None and left <= 0:
            raise _failure(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        self._opens += 1
        stream = client.next_stream()
        self._turn_id = client.new_id()
        stream.open(self._turn_id, self._request, left, self._metadata, self._fields, self._queue)
        self._stream = stream

    def _reopen(self) -> bool:
        """A turn no peer started, opened again on a new stream while its deadline and `REOPENS` allow."""
        self._finish(cancel=False, keep_timer=True)
        if self._seen or self._opens > REOPENS:
            return False
        self._open()  # (past its deadline: raises DEADLINE_EXCEEDED)
        return True

    def _finish(self, *, cancel: bool, keep_timer: bool = False) -> None:
        if self._timer is not None and not keep_timer:
            self._timer.cancel()
            self._timer = None
        if self._stream is not None:
            self._stream.close_turn(self._turn_id, cancel=cancel)
            self._stream = None


class TurnClient:
    """The turns of one client of a peer's turn method. `open_call()` starts a stream (the stub's bidi method);
    `peer` names the peer in messages ("LLM gateway"); `target` is the channel's (services/common/channels.py),
    whose replicas the streams spread over."""

    def __init__(self, open_call: Callable[[], Any], types: ClientTurnTypes, *, peer: str,
                 target: str | None = None) -> None:
        self._open_call = open_call
        self.types = types
        self.peer = peer
        self._target = target
        listed = listed_replicas(target) if target is not None else 1
        self._streams: list[_TurnStream | None] = [None] * (listed or 1)
        self._live: set[_TurnStream] = set()  # every stream not ended yet, retired ones included
        self._next = 0
        # A name is resolved in the background, every `ROTATE_AFTER_S` (monotonic); a list is counted once.
        self._counted_at = -ROTATE_AFTER_S if listed is None else float("inf")
        self._counting: asyncio.Future | None = None
        self._ids = 0
        self.closed = False

    def call(self, request: Any, *, timeout: float | None = None, metadata: Any = None, **fields: Any) -> TurnCall:
        """A turn of `request`, as a stub's method makes a call of it; `fields` are the service's own fields of the
        turn (ChatTurn's `whole`)."""
        return TurnCall(self, request, timeout, metadata, fields)

    @property
    def streams(self) -> list[_TurnStream]:
        """The streams of the lanes now (retired ones that still carry turns are not among them)."""
        return [stream for stream in self._streams if stream is not None]

    def new_id(self) -> int:
        self._ids += 1
        return self._ids

    def next_stream(self) -> _TurnStream:
        """The next lane's stream that takes turns. When none does (they rotate together, or failed), every lane
        gets a new stream, one after the other: round_robin sends consecutive calls to consecutive replicas, so
        the lanes stay on different replicas."""
        if self._target is not None and time.monotonic() - self._counted_at >= ROTATE_AFTER_S:
            self._counted_at = time.monotonic()
            self._counting = asyncio.ensure_future(self._count_lanes(self._target))
        streams = self._streams
        for _ in streams:
            self._next = (self._next + 1) % len(streams)
            stream = streams[self._next]
            if stream is not None and stream.accepting():
                return stream
        for lane, old in enumerate(streams):
            if old is not None:
                old.retire()
            streams[lane] = _TurnStream(self._open_call(), self.types, self.peer, self._live.discard)
            self._live.add(streams[lane])
        return streams[self._next]

    async def _count_lanes(self, target: str) -> None:
        lanes = await resolved_replicas(target)
        if lanes != len(self._streams):
            for stream in self._streams:
                if stream is not None:
                    stream.retire()
            self._streams = [None] * lanes

    async def close(self) -> None:
        """Fails the turns still running (CANCELLED), and lets go of the streams: grpc shares connections between
        channels, and a call kept alive would keep its connection's reconnect backoff alive for the next channel
        to the same address."""
        self.closed = True
        if self._counting is not None:
            self._counting.cancel()
        for stream in list(self._live):
            stream.cancel()
        self._live.clear()
        self._streams = [None] * len(self._streams)


def _ended_unread(queue: Inbox, message_type: type) -> bool:
    """Whether a turn's end (or its stream's) already came, unread: its caller stopped at its last chunk (a whole
    turn's answer). Then there is nothing to cancel."""
    while not queue.empty():
        item = queue.get_nowait()
        if item.__class__ is _Expired or item.__class__ is message_type and item.HasField("chunk"):
            continue
        return True
    return False
