"""LlmService.ChatTurns: many Chat and Complete turns on one long-lived stream (the orchestrator's way to call
them).

A gRPC call costs both processes hundreds of microseconds of CPU, and each of its messages is written on its
own; under a burst of runs that is most of a run's start. Here a turn costs neither: the caller opens and
cancels turns by id in its messages, and every turn's chunks go out in shared messages, what queued up while
one was written going out in the next, whichever turns it belongs to (`bench/mux_floor.py` measures the
difference). Each turn behaves as a Chat call: its own deadline (`timeout_s`), its cancel, the status it ends
with, its request id and trace from its metadata, and it is counted and traced as a Chat call
(`services.common.interceptors.InnerCall`). A turn waits for its previous chunk to be written before it takes
the next, so its deltas merge meanwhile exactly as a Chat call's do (services/common/coalesce.py).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import AsyncIterator, Awaitable, Callable

import grpc
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.interceptors import InnerCall

CHAT_METHOD = "/trellis.llm.v1.LlmService/Chat"
COMPLETE_METHOD = "/trellis.llm.v1.LlmService/Complete"


class _Outbox:
    """Every turn's messages for the caller: the first goes out at once, what queues up while a message is
    written goes out together in the next. `put` returns a future that is done once its message is written."""

    def __init__(self) -> None:
        self._messages: list[llm_pb.ChatTurnMessage] = []
        self._written: asyncio.Future | None = None
        self._ready = asyncio.Event()

    def put(self, message: llm_pb.ChatTurnMessage) -> asyncio.Future:
        if self._written is None:
            self._written = asyncio.get_running_loop().create_future()
        self._messages.append(message)
        self._ready.set()
        return self._written

    def wake(self) -> None:
        self._ready.set()

    async def take(self) -> tuple[list[llm_pb.ChatTurnMessage], asyncio.Future | None]:
        await self._ready.wait()
        self._ready.clear()
        messages, written = self._messages, self._written
        self._messages, self._written = [], None
        return messages, written


Chat = Callable[[llm_pb.ChatRequest, float | None], AsyncIterator[llm_pb.ChatResponse]]
Complete = Callable[[llm_pb.ChatRequest, float | None], Awaitable[llm_pb.ChatResponse]]


class Turns:
    """The gateway's ChatTurns streams. `chat(request, timeout_s)` streams a turn's chunks, as Chat would;
    `complete(request, timeout_s)` gives a whole turn (`whole`), as Complete would.
    `drain()` (the server is shutting down): every stream refuses new turns (`again`: the caller opens them
    on a new stream, which reaches a gateway that serves) and ends once its running turns are done, so a
    shutdown waits for turns, not for streams that would never end."""

    def __init__(self, chat: Chat, complete: Complete, service: str) -> None:
        self._chat = chat
        self._complete = complete
        self._service = service  # the `service` label of the Chat calls the turns are counted as
        self._draining = False
        self._outboxes: set[_Outbox] = set()

    async def drain(self) -> None:
        self._draining = True
        for outbox in self._outboxes:
            outbox.wake()

    async def serve(self, requests: AsyncIterator[llm_pb.ChatTurnsRequest]) -> AsyncIterator[llm_pb.ChatTurnsResponse]:
        outbox = _Outbox()
        turns: dict[int, asyncio.Task] = {}
        closed = False  # the caller opens no more turns

        async def run(turn: llm_pb.ChatTurn) -> None:
            call = InnerCall(self._service, COMPLETE_METHOD if turn.whole else CHAT_METHOD, tuple(turn.metadata.items()))
            with call:
                try:
                    if turn.whole:
                        whole = await self._complete(turn.request, turn.timeout_s or None)
                        outbox.put(llm_pb.ChatTurnMessage(id=turn.id, chunk=whole))
                    else:
                        async with aclosing(self._chat(turn.request, turn.timeout_s or None)) as chunks:  # a cancel closes it
                            async for chunk in chunks:
                                await outbox.put(llm_pb.ChatTurnMessage(id=turn.id, chunk=chunk))
                    end = llm_pb.ChatTurnEnd()
                except BaseException as exc:
                    code, message = call.fail(exc)
                    if isinstance(exc, asyncio.CancelledError):  # cancelled by the caller, or the stream ended
                        raise
                    end = llm_pb.ChatTurnEnd(code=code.value[0], message=message)
                outbox.put(llm_pb.ChatTurnMessage(id=turn.id, end=end))

        def ended(turn_id: int, task: asyncio.Task) -> None:
            if turns.get(turn_id) is task:
                del turns[turn_id]
            if not turns:
                outbox.wake()

        async def take_requests() -> None:
            nonlocal closed
            try:
                async for request in requests:
                    for turn_id in request.cancel:
                        task = turns.get(turn_id)
                        if task is not None:
                            task.cancel()
                    for turn in request.open:
                        if self._draining:
                            outbox.put(llm_pb.ChatTurnMessage(id=turn.id, end=llm_pb.ChatTurnEnd(
                                code=grpc.StatusCode.UNAVAILABLE.value[0], again=True,
                                message="the LLM gateway is shutting down")))
                            continue
                        task = turns[turn.id] = asyncio.ensure_future(run(turn))
                        task.add_done_callback(lambda task, turn_id=turn.id: ended(turn_id, task))
            finally:
                closed = True
                outbox.wake()

        self._outboxes.add(outbox)
        taking = asyncio.ensure_future(take_requests())
        try:
            while True:
                messages, written = await outbox.take()
                if messages:
                    yield llm_pb.ChatTurnsResponse(messages=messages)
                    written.set_result(None)
                elif (closed or self._draining) and not turns:
                    break
            if closed:
                await taking  # (re-raises what ended the caller's requests: a broken stream)
        finally:
            self._outboxes.discard(outbox)
            taking.cancel()
            for task in list(turns.values()):
                task.cancel()
            await asyncio.gather(taking, *turns.values(), return_exceptions=True)
