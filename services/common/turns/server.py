"""The server side of turns on shared streams: many calls of one method carried by one long-lived stream (how the
orchestrator reaches the LLM gateway, trellis.llm.internal.v1.ChatTurnService, and how the gateway reaches the
orchestrator, trellis.canvas.internal.v1.RunTurnService; docs/transport.md).

A gRPC call costs both processes far more CPU than a message on a stream kept open (docs/transport.md),
and each of its messages is written on its own; under a burst of runs that is most of a run's start. Here a turn costs neither: the caller opens and
cancels turns by id in its messages, and every turn's chunks go out in shared messages, what queued up while
one was written going out in the next, whichever turns it belongs to (docs/transport.md has the
measurements). Each turn behaves as a call of its own: its deadline (`timeout_s`), its cancel, the status it ends
with, its request id and trace from its metadata, and it is counted and traced as a call of the method it stands
for (`services.common.interceptors.InnerCall`). A turn's handler awaits each chunk's `send` before it takes the
next, so its deltas merge meanwhile exactly as a call's do (services/common/coalesce.py).

A message carries what queued up to about `channels.BATCH_BYTES`, the rest going in the next ones, so turns that
share a stream never make a message larger than gRPC takes; a chunk that alone is larger fails its own turn with
RESOURCE_EXHAUSTED, as it would fail a call of its own.

The messages of every such service have the same shape (see `TurnTypes`): a request opens turns (`open`:
`id`, `request`, `timeout_s`, `metadata`) and cancels them by id (`cancel`); a response carries `messages`,
each with its turn's `id` and a `chunk` or the turn's `end` (`code`, `message`, `again`,
`trailing_metadata`: what the call's trailing metadata would carry, rich status details among it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from services.common import channels
from services.common.channels import MAX_MESSAGE_BYTES
from services.common.errors import ResourceExhausted
from services.common.interceptors import InnerCall, trailing_of


class _Outbox:
    """Every turn's messages for the caller: the first goes out at once, what queues up while a message is
    written goes out together in the next. `put` returns a future that is done once its message is written."""

    def __init__(self) -> None:
        self._messages: list[Any] = []
        self._sizes: list[int] = []  # each message's, where known (a chunk's; an end's is small: 0)
        self._written: asyncio.Future | None = None
        self._ready = asyncio.Event()

    def put(self, message: Any, size: int = 0) -> asyncio.Future:
        if self._written is None:
            self._written = asyncio.get_running_loop().create_future()
        self._messages.append(message)
        self._sizes.append(size)
        self._ready.set()
        return self._written

    def wake(self) -> None:
        self._ready.set()

    @property
    def pending(self) -> bool:
        return bool(self._messages)

    async def take(self) -> tuple[list[list[Any]], asyncio.Future | None]:
        """What queued up, in messages' worth (`channels.in_batches`), and its future."""
        await self._ready.wait()
        self._ready.clear()
        messages, sizes, written = self._messages, self._sizes, self._written
        self._messages, self._sizes, self._written = [], [], None
        return channels.in_batches(messages, sizes), written


@dataclass(frozen=True, slots=True)
class TurnTypes:
    """A service's message classes for its turns: `response(messages=[...])`, `message(id=, chunk=)` or
    `message(id=, end=end(code=, message=, again=))`."""

    response: type
    message: type
    end: type


Send = Callable[[Any], Awaitable[None]]  # queue a chunk of the turn; awaiting it waits until it is written
Handler = Callable[[Any, Send], Awaitable[None]]  # runs one turn (the `open` message), sending its chunks


class TurnServer:
    """A service's turn streams. `handle(turn, send)` runs one turn as its call would, sending its chunks;
    `method_of(turn)` names the method it is counted as (its full gRPC name); `service` is the `service` label
    of those calls' metrics; `shutting_down`, what a turn refused while draining is told.

    `drain()` (the server is shutting down): every stream refuses new turns (`again`: the caller opens them
    on a new stream, which reaches a replica that serves) and ends once its running turns are done, so a
    shutdown waits for turns, not for streams that would never end."""

    def __init__(self, types: TurnTypes, handle: Handler, method_of: Callable[[Any], str], *, service: str,
                 shutting_down: str) -> None:
        self._types = types
        self._handle = handle
        self._method_of = method_of
        self._service = service
        self._shutting_down = shutting_down
        self._draining = False
        self._outboxes: set[_Outbox] = set()
        self.started = 0  # turns taken, and those running now (for inspection)
        self.running = 0

    async def drain(self) -> None:
        self._draining = True
        for outbox in self._outboxes:
            outbox.wake()

    async def serve(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        types = self._types
        outbox = _Outbox()
        turns: dict[int, asyncio.Task] = {}
        closed = False  # the caller opens no more turns

        async def run(turn: Any) -> None:
            turn_id = turn.id
            call = InnerCall(self._service, self._method_of(turn), tuple(turn.metadata.items()))
            self.started += 1
            self.running += 1

            def send(chunk: Any) -> Awaitable[None]:
                message = types.message(id=turn_id, chunk=chunk)
                size = message.ByteSize()
                if size > MAX_MESSAGE_BYTES:
                    raise ResourceExhausted(f"a message of {size} bytes is larger than the {MAX_MESSAGE_BYTES} a "
                                            "message may have")
                # Every turn in a message waits on the same future: shielded, so one turn's cancel is its own.
                return asyncio.shield(outbox.put(message, size))

            with call:
                try:
                    await self._handle(turn, send)
                    end = types.end()
                except BaseException as exc:
                    code, message = call.fail(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        if asyncio.current_task().cancelling():  # cancelled by the caller, or the stream ended
                            raise
                        message = "the turn's work was cancelled in the server"  # the caller still hears its end
                    end = types.end(code=code.value[0], message=message,
                                    trailing_metadata={key: value.encode() if isinstance(value, str) else value
                                                       for key, value in trailing_of(exc)})
                finally:
                    self.running -= 1
                outbox.put(types.message(id=turn_id, end=end))

        def ended(turn_id: int, task: asyncio.Task) -> None:
            if turns.get(turn_id) is task:
                del turns[turn_id]
            if not turns:
                outbox.wake()
            if task.cancelled():
                # A cancelled task keeps the CancelledError it ended with until asked for it, and that error's
                # traceback holds the turn's frames, which refer back to the task (its deadline's asyncio.timeout
                # does): a cycle that only a full collection frees. Asked for here, the frames go at once.
                try:
                    task.exception()
                except asyncio.CancelledError:
                    pass

        async def take_requests() -> None:
            nonlocal closed
            try:
                async for request in requests:
                    for turn in request.open:  # before the cancels: a turn may be opened and cancelled in one message
                        if self._draining:
                            outbox.put(types.message(id=turn.id, end=types.end(
                                code=grpc.StatusCode.UNAVAILABLE.value[0], again=True, message=self._shutting_down)))
                            continue
                        task = turns[turn.id] = asyncio.ensure_future(run(turn))
                        task.add_done_callback(lambda task, turn_id=turn.id: ended(turn_id, task))
                    for turn_id in request.cancel:
                        task = turns.get(turn_id)
                        if task is not None:
                            task.cancel()
            finally:
                closed = True
                outbox.wake()

        self._outboxes.add(outbox)
        taking = asyncio.ensure_future(take_requests())
        try:
            while True:
                parts, written = await outbox.take()
                if parts:
                    for part in parts:
                        yield types.response(messages=part)
                    written.set_result(None)
                # After every pass: the wake that said the last turn ended may have come with its end message.
                if (closed or self._draining) and not turns and not outbox.pending:
                    break
            if closed:
                await taking  # (re-raises what ended the caller's requests: a broken stream)
        finally:
            self._outboxes.discard(outbox)
            taking.cancel()
            for task in list(turns.values()):
                task.cancel()
            await asyncio.gather(taking, *turns.values(), return_exceptions=True)

