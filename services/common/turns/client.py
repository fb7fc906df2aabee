"""The client side of turns on shared streams (services/common/turn_server.py says why): how a caller reaches a
peer's method without a gRPC call per call of it (the orchestrator's LLM turns, services/clients/llm_turns.py;
the gateway's runs, gateway/orchestrator.py).

A turn is opened on one of the client's streams by id, with its deadline and the metadata its call would carry;
its messages come back through the stream's one reader. Opens and cancels that queue up while a message is
written go out together in the next. A turn keeps a call's behaviour: its deadline (the peer's, and a timer here
in case the peer cannot say so), its cancel when the caller stops reading, its status (raised as the
`grpc.aio.AioRpcError` its call would have raised).

A turn whose caller stops reading buffers its chunks here (at most one turn's output), where a call of its own
would have held the peer back with HTTP/2 flow control; the stream's reader never waits for a caller.

Replicas: the client keeps one stream per replica of the peer (its lanes: the addresses its target lists or its
name resolves to, as the channel's round_robin sees them) and opens turns on them in turn. The lanes' streams are
opened one after the other, and round_robin sends consecutive calls to consecutive replicas, so turns spread over
replicas as calls do. A stream takes new turns for `ROTATE_AFTER_S` or `ROTATE_AFTER_TURNS`, whichever comes
first; once no lane takes turns, all are opened again, so a replica that joined (scale-out) gets its share, and a
name's lanes are counted again every `ROTATE_AFTER_S`. A retired stream is closed once its last turn has ended.
A peer that does not know the method (an older replica) answers UNIMPLEMENTED for the stream: `supported` is
then False for `ROTATE_AFTER_S`, and the caller makes a call per turn meanwhile (a rolling upgrade replaces the
older replicas).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import grpc

from services.common import channels
from services.common.channels import MAX_MESSAGE_BYTES, outbound_metadata

ROTATE_AFTER_S = 30.0
ROTATE_AFTER_TURNS = 1000
MAX_LANES = 64


class _Expired:
    """Put in a turn's queue when its deadline passed without the peer's word."""


class StreamEnded(grpc.aio.AioRpcError):
    """The turn's stream ended without an error of the turn's: the peer drained it (it shuts down) or refused
    the turn for that reason (`again`), or this client retired it. A turn that delivered nothing yet may be
    opened again: a new stream reaches a replica that serves."""


class TurnsUnsupported(grpc.aio.AioRpcError):
    """The peer has no such method (UNIMPLEMENTED for the stream itself, not a turn's own status): make a call
    instead; `TurnClient.supported` is False for a while."""


def _failure(code: grpc.StatusCode, details: str, kind: type[grpc.aio.AioRpcError] = grpc.aio.AioRpcError
             ) -> grpc.aio.AioRpcError:
    return kind(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass(frozen=True, slots=True)
class ClientTurnTypes:
    """A service's message classes for its turns, as the client sends and reads them: `request(open=[...],
    cancel=[...])`, `turn(id=, request=, timeout_s=, metadata=, **fields)`, and `message`, what the responses
    carry (services/common/turn_server.py)."""

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
        self.turns: dict[int, asyncio.Queue] = {}
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

    def open(self, turn_id: int, request: Any, timeout_s: float | None, fields: dict[str, Any]) -> asyncio.Queue:
        """The turn's queue; a turn larger than a message may be fails here, as its call would, and opens nothing."""
        metadata = outbound_metadata()
        turn = self.types.turn(id=turn_id, request=request, timeout_s=timeout_s or 0.0, metadata=dict(metadata or ()),
                               **fields)
        size = turn.ByteSize()
        if size > MAX_MESSAGE_BYTES:
            raise _failure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"a request of {size} bytes is larger than the {MAX_MESSAGE_BYTES} a message may have")
        queue: asyncio.Queue = asyncio.Queue()
        self.turns[turn_id] = queue
        self.opened += 1
        self._opens.append((turn, size))
        self._flush()
        return queue

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
        return _failure(grpc.StatusCode.UNAVAILABLE, f"the {self.peer} ended the stream of turns", StreamEnded)

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
        failure: grpc.aio.AioRpcError | None = None
        try:
            async for response in self.call:
                for message in response.messages:
                    queue = self.turns.get(message.id)
                    if queue is not None:
                        queue.put_nowait(message)
            failure = self._ended()
        except grpc.aio.AioRpcError as exc:
            failure = exc
        except asyncio.CancelledError:  # the client closed
            failure = _failure(grpc.StatusCode.CANCELLED, f"the client of the {self.peer} was closed")
        finally:  # every turn still here hears how the stream ended, whatever ended it
            failure = failure or _failure(grpc.StatusCode.UNKNOWN, "the stream of turns broke")
            if self.failure is None:
                self.failure = failure
            for queue in self.turns.values():
                queue.put_nowait(failure)
            self._on_end(self)

    def cancel(self) -> None:
        self.call.cancel()


class TurnClient:
    """The turns of one client of a peer's method. `open_call()` starts a stream (the stub's bidi method);
    `peer` names the peer in messages ("LLM gateway"); `target` is the channel's (services/common/channels.py),
    whose replicas the streams spread over."""

    def __init__(self, open_call: Callable[[], Any], types: ClientTurnTypes, *, peer: str,
                 target: str | None = None) -> None:
        self._open_call = open_call
        self._types = types
        self._peer = peer
        self._target = target
        listed = listed_replicas(target) if target is not None else 1
        self._streams: list[_TurnStream | None] = [None] * (listed or 1)
        self._live: set[_TurnStream] = set()  # every stream not ended yet, retired ones included
        self._next = 0
        # A name is resolved in the background, every `ROTATE_AFTER_S` (monotonic); a list is counted once.
        self._counted_at = -ROTATE_AFTER_S if listed is None else float("inf")
        self._counting: asyncio.Future | None = None
        self._ids = 0
        self._closed = False
        self._calls_until = 0.0  # the peer answered UNIMPLEMENTED: a call per turn until then (monotonic)

    @property
    def supported(self) -> bool:
        """Whether turns go on streams: after an UNIMPLEMENTED, not for `ROTATE_AFTER_S` (a rolling upgrade
        replaces the older replicas meanwhile)."""
        return time.monotonic() >= self._calls_until

    @property
    def streams(self) -> list[_TurnStream]:
        """The streams of the lanes now (retired ones that still carry turns are not among them)."""
        return [stream for stream in self._streams if stream is not None]

    def _stream(self) -> _TurnStream:
        """The next lane's stream that takes turns. When none does (they rotate together, or failed), every lane
        gets a new stream, one after the other: round_robin sends consecutive calls to consecutive replicas, so
        the lanes stay on different replicas."""
        if time.monotonic() - self._counted_at >= ROTATE_AFTER_S:
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
            streams[lane] = _TurnStream(self._open_call(), self._types, self._peer, self._live.discard)
            self._live.add(streams[lane])
        return streams[self._next]

    async def _count_lanes(self, target: str) -> None:
        lanes = await resolved_replicas(target)
        if lanes != len(self._streams):
            for stream in self._streams:
                if stream is not None:
                    stream.retire()
            self._streams = [None] * lanes

    async def turn(self, request: Any, deadline: float | None, **fields: Any) -> AsyncIterator[Any]:
        """One try of a turn: its chunks, then its end. `deadline` is on the loop's clock; `fields` are the
        service's own fields of the turn (ChatTurn's `whole`).

        A failure raises the `grpc.aio.AioRpcError` its call would have: a `StreamEnded` one when the turn
        may be opened again on a new stream (if nothing of it was seen), a `TurnsUnsupported` one when the peer
        has no such method (then `supported` is False for a while: make a call instead). Closing the iterator
        before the end cancels the turn at the peer."""
        if self._closed:
            raise _failure(grpc.StatusCode.CANCELLED, f"the client of the {self._peer} was closed")
        loop = asyncio.get_running_loop()
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:  # (a timeout of 0 would be none at all)
            raise _failure(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        stream = self._stream()
        self._ids += 1
        turn_id = self._ids
        queue = stream.open(turn_id, request, left, fields)
        timer = loop.call_at(deadline, queue.put_nowait, _Expired()) if deadline is not None else None
        message_type = self._types.message
        ended = False
        try:
            while True:
                item = await queue.get()
                if item.__class__ is message_type:
                    if item.HasField("chunk"):
                        yield item.chunk
                        continue
                    ended = True
                    end = item.end
                    if end.again:  # that replica shuts down and never started it: a new stream
                        stream.retire()
                        raise _failure(grpc.StatusCode.UNAVAILABLE, end.message, StreamEnded)
                    if end.code:
                        raise _failure(_CODES.get(end.code, grpc.StatusCode.UNKNOWN), end.message)
                    return
                if item.__class__ is _Expired:
                    raise _failure(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                ended = True  # the stream failed or ended: every turn on it ended with it
                kind = type(item)
                if item.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._calls_until = time.monotonic() + ROTATE_AFTER_S
                    kind = TurnsUnsupported
                raise _failure(item.code(), item.details() or "", kind)  # each turn its own exception
        finally:
            if timer is not None:
                timer.cancel()
            stream.close_turn(turn_id, cancel=not (ended or _ended_unread(queue, message_type)))

    async def close(self) -> None:
        """Fails the turns still running (CANCELLED), and lets go of the streams: grpc shares connections between
        channels, and a call kept alive would keep its connection's reconnect backoff alive for the next channel
        to the same address."""
        self._closed = True
        if self._counting is not None:
            self._counting.cancel()
        for stream in list(self._live):
            stream.cancel()
        self._live.clear()
        self._streams = [None] * len(self._streams)


def _ended_unread(queue: asyncio.Queue, message_type: type) -> bool:
    """Whether a turn's end (or its stream's) already came, unread: its caller stopped at its last chunk (a whole
    turn's answer). Then there is nothing to cancel."""
    while not queue.empty():
        item = queue.get_nowait()
        if item.__class__ is _Expired or item.__class__ is message_type and item.HasField("chunk"):
            continue
        return True
    return False


def listed_replicas(target: str) -> int | None:
    """How many replicas a channel's target lists: an `ipv4:`/`ipv6:` list, or one literal address; None for a
    host name, which `resolved_replicas` resolves."""
    if target.startswith(("ipv4:", "ipv6:")):
        return max(1, min(MAX_LANES, len(target.split(":", 1)[1].split(","))))
    host, _ = _host_port(target)
    if host is None:
        return 1  # a scheme this does not know: one lane, as for one address
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return 1


async def resolved_replicas(target: str) -> int:
    """How many replicas a host name reaches, as round_robin spreads over them: the addresses it resolves to
    (a headless Service lists each pod); 1 when it cannot be resolved now (at most `MAX_LANES`)."""
    host, port = _host_port(target)
    if host is None:
        return 1
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return 1
    return max(1, min(MAX_LANES, len({info[4][:2] for info in infos})))


def _host_port(target: str) -> tuple[str | None, int]:
    """The host and port of `host:port` or `dns:///host:port`; (None, 0) for anything else."""
    if "://" in target:
        scheme, _, target = target.partition("://")
        if scheme != "dns":
            return None, 0
        target = target.lstrip("/")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return None, 0
    return host.strip("[]"), int(port)
