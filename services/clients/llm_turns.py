"""The LLM client's turns on shared streams (LlmService.ChatTurns): how `LlmClient.stream_chat` reaches the
gateway without a gRPC call per turn (services/llm_gateway/turns.py says why).

A turn is opened on the client's current stream by id, with its deadline and the metadata a Chat call would
carry; its messages come back through the stream's one reader. Opens and cancels that queue up while a message
is written go out together in the next. A turn keeps a Chat call's behaviour: its deadline (the gateway's, and
a timer here in case the gateway cannot say so), its cancel when the caller stops reading, its status as the
typed error `_rpc.py` gives a call, and the retry rule: a turn whose stream failed before the turn's first
chunk, while the channel was not connected, is tried again on a new stream.

A turn whose caller stops reading buffers its chunks here (at most one turn's output), where a call of its own
would have held the gateway back with HTTP/2 flow control; the stream's reader never waits for a caller.

A stream takes new turns for `ROTATE_AFTER_S` or `ROTATE_AFTER_TURNS`, whichever comes first; the next one is a
new call, which the channel's round_robin sends to the next gateway replica, so turns keep spreading over
replicas as calls do. A retired stream is closed once its last turn has ended. A gateway that does not know
ChatTurns (an older replica) answers UNIMPLEMENTED: the client then makes a Chat call per turn, and tries a
stream again after `ROTATE_AFTER_S` (a rolling upgrade replaces the older gateways meanwhile).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, TypeVar

import grpc
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.channels import outbound_metadata
from services.common.context import peer_call_sent
from services.common.errors import DeadlineExceeded

R = TypeVar("R")

ROTATE_AFTER_S = 30.0
ROTATE_AFTER_TURNS = 1000


class _Expired:
    """Put in a turn's queue when its deadline passed without the gateway's word."""


class _TurnStream:
    """One ChatTurns call: its turns by id, the opens and cancels to send, its reader."""

    def __init__(self, stub: Any) -> None:
        self.call = stub.ChatTurns()
        self.turns: dict[int, asyncio.Queue] = {}
        self.failure: grpc.aio.AioRpcError | None = None  # once the call has failed or ended
        self.opened = 0
        self.retired = False
        self._born = time.monotonic()
        self._opens: list[llm_pb.ChatTurn] = []
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

    def open(self, turn_id: int, request: llm_pb.ChatRequest, timeout_s: float | None, whole: bool) -> asyncio.Queue:
        metadata = outbound_metadata()
        queue: asyncio.Queue = asyncio.Queue()
        self.turns[turn_id] = queue
        self.opened += 1
        self._opens.append(llm_pb.ChatTurn(id=turn_id, request=request, timeout_s=timeout_s or 0.0,
                                           metadata=dict(metadata or ()), whole=whole))
        self._flush()
        return queue

    def close_turn(self, turn_id: int, *, cancel: bool) -> None:
        if self.turns.pop(turn_id, None) is not None and cancel and self.failure is None:
            self._cancels.append(turn_id)
            self._flush()
        self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self.retired and not self.turns and self.failure is None and not self._writing:
            self.failure = _ended()  # no turn will come here again
            asyncio.ensure_future(self._done_writing())

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
                opens, cancels, self._opens, self._cancels = self._opens, self._cancels, [], []
                await self.call.write(llm_pb.ChatTurnsRequest(open=opens, cancel=cancels))
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            pass  # the call failed or was closed: the reader tells every turn
        finally:
            self._writing = False
            self._close_if_idle()

    async def _read(self) -> None:
        failure: grpc.aio.AioRpcError | None = None
        try:
            async for response in self.call:
                for message in response.messages:
                    queue = self.turns.get(message.id)
                    if queue is not None:
                        queue.put_nowait(message)
            failure = _ended()
        except grpc.aio.AioRpcError as exc:
            failure = exc
        except asyncio.CancelledError:  # the client closed
            failure = _failure(grpc.StatusCode.CANCELLED, "the LLM client was closed")
        finally:  # every turn still here hears how the stream ended, whatever ended it
            failure = failure or _failure(grpc.StatusCode.UNKNOWN, "the stream of turns broke")
            if self.failure is None:
                self.failure = failure
            for queue in self.turns.values():
                queue.put_nowait(failure)

    def cancel(self) -> None:
        self.call.cancel()


class _StreamEnded(grpc.aio.AioRpcError):
    """The stream ended without an error: the gateway drained it (it shuts down), or this client retired it."""


def _ended() -> grpc.aio.AioRpcError:
    return _StreamEnded(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                        "the LLM gateway ended the stream of turns")


def _failure(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class ChatTurns:
    """The turns of one LlmClient (`peer`: its `_rpc.Peer`, whose deadline, retry and error rules apply)."""

    def __init__(self, peer: Any) -> None:
        self._peer = peer
        self._stream: _TurnStream | None = None
        self._ids = 0
        self._calls_until = 0.0  # a gateway answered UNIMPLEMENTED: a Chat call per turn until then (monotonic)

    @property
    def supported(self) -> bool:
        """Whether turns go on ChatTurns streams: after an UNIMPLEMENTED, not for `ROTATE_AFTER_S` (a rolling
        upgrade replaces the older gateways meanwhile)."""
        return time.monotonic() >= self._calls_until

    def _current(self) -> _TurnStream:
        stream = self._stream
        if stream is None or not stream.accepting():
            stream = self._stream = _TurnStream(self._peer._stub)
        return stream

    async def whole(self, request: llm_pb.ChatRequest, timeout_s: float | None) -> llm_pb.ChatResponse:
        """The whole turn in one message, as Complete gives it."""
        async for whole in self.stream(request, _same, timeout_s, whole=True):
            return whole
        raise AssertionError("the gateway ended a whole turn without its message")  # (it always sends one)

    async def stream(self, request: llm_pb.ChatRequest, convert: Callable[[llm_pb.ChatResponse], R],
                     timeout_s: float | None, *, whole: bool = False) -> AsyncIterator[R]:
        """The turn's chunks, as a Chat call streams them (`whole`: its one message, as Complete gives it)."""
        peer = self._peer
        deadline = peer._deadline(timeout_s)
        loop = asyncio.get_running_loop()
        attempt = 1
        while True:
            if not self.supported:
                if whole:
                    yield convert(await peer._unary(peer._stub.Complete, request, peer._left(deadline)))
                    return
                async for item in peer._stream(peer._stub.Chat, request, convert, peer._left(deadline)):
                    yield item
                return
            stream = self._current()
            self._ids += 1
            turn_id = self._ids
            queue = stream.open(turn_id, request, peer._left(deadline), whole)
            peer_call_sent()
            timer = loop.call_at(deadline, queue.put_nowait, _Expired()) if deadline is not None else None
            started = ended = False
            try:
                while True:
                    item = await queue.get()
                    if item.__class__ is llm_pb.ChatTurnMessage:
                        if item.HasField("chunk"):
                            started = True
                            yield convert(item.chunk)
                            continue
                        ended = True
                        if item.end.again:  # that gateway shuts down and never started it: a new stream
                            stream.retire()
                            if not self._again_soon(attempt, deadline):
                                raise peer.status_error(grpc.StatusCode.UNAVAILABLE, item.end.message)
                            break
                        if item.end.code:
                            raise peer.status_error(_CODES.get(item.end.code, grpc.StatusCode.UNKNOWN), item.end.message)
                        return
                    if item.__class__ is _Expired:
                        raise DeadlineExceeded("Deadline Exceeded")
                    ended = True  # the stream failed or ended: every turn on it ended with it
                    if item.code() == grpc.StatusCode.UNIMPLEMENTED:
                        self._calls_until = time.monotonic() + ROTATE_AFTER_S
                        break  # this turn, and those after it for a while, as Chat calls
                    if started:
                        raise peer.status_error(item.code(), item.details())
                    if isinstance(item, _StreamEnded):  # the gateway ended it before it took this turn
                        if not self._again_soon(attempt, deadline):
                            raise peer.status_error(item.code(), item.details())
                    elif not await peer._again(item, attempt, deadline):
                        raise peer.status_error(item.code(), item.details())
                    break
            finally:
                if timer is not None:
                    timer.cancel()
                stream.close_turn(turn_id, cancel=not ended)
            attempt += 1

    def _again_soon(self, attempt: int, deadline: float | None) -> bool:
        """A turn no gateway started, because its stream ended: tried again on a new stream while tries and
        time are left."""
        return attempt < self._peer.retry.attempts and (deadline is None or asyncio.get_running_loop().time() < deadline)

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _same(message: llm_pb.ChatResponse) -> llm_pb.ChatResponse:
    return message
