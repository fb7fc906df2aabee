"""The turn server's own rules (services/common/turns/server.py), driven step by step: its `serve()` is read as
grpc reads it, one response at a time, while the test decides when each is "written" (the next read). Turns over
real streams are tested through their users: tests/services/clients/test_llm_turns.py, tests/e2e/test_run_turns.py."""

from __future__ import annotations

import asyncio

import pytest
from trellis.llm.internal.v1 import chat_turn_service_pb2 as turn_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.turns import TurnServer, TurnTypes

TYPES = TurnTypes(turn_pb.ChatTurnsResponse, turn_pb.ChatTurnMessage, turn_pb.ChatTurnEnd)


class Caller:
    """The caller's side of one stream: what it sends (never half-closed), and the server's responses."""

    def __init__(self, server: TurnServer) -> None:
        self._requests: asyncio.Queue = asyncio.Queue()
        self.responses = server.serve(self._read())

    async def _read(self):
        while True:
            yield await self._requests.get()

    def send(self, *, open=(), cancel=()) -> None:
        self._requests.put_nowait(turn_pb.ChatTurnsRequest(open=list(open), cancel=list(cancel)))

    async def next(self) -> list[tuple[int, str]]:
        """The next response, as (turn id, "chunk" or "end <code>") pairs."""
        response = await asyncio.wait_for(anext(self.responses), 10)
        return [(m.id, "chunk" if m.HasField("chunk") else f"end {m.end.code}") for m in response.messages]


def turn(turn_id: int, *, whole: bool = False) -> turn_pb.ChatTurn:
    return turn_pb.ChatTurn(id=turn_id, whole=whole)


async def one_chunk(turn: turn_pb.ChatTurn, send) -> None:
    """A whole turn sends its one chunk and ends (its end may share the chunk's message); a streamed one waits
    until its chunk is written."""
    chunk = llm_pb.ChatResponse(content_delta=f"from {turn.id}")
    if turn.whole:
        send(chunk)
    else:
        await send(chunk)


def server(handle=one_chunk) -> TurnServer:
    return TurnServer(TYPES, handle, lambda turn: "/test.Turns/Chat", service="test", shutting_down="going away")


async def test_a_turn_cancelled_while_its_chunk_is_written_leaves_the_others_in_that_message_alone():
    turns = server()
    caller = Caller(turns)
    caller.send(open=[turn(1), turn(2)])
    assert await caller.next() == [(1, "chunk"), (2, "chunk")]  # both wait for this message to be written
    caller.send(cancel=[1])  # the caller of turn 1 went away meanwhile
    await asyncio.sleep(0.05)
    assert await caller.next() == [(2, "end 0")]  # turn 2 ends as it would have
    assert turns.running == 0


async def test_a_turn_opened_and_cancelled_in_one_message_does_not_run():
    never = asyncio.Event()

    async def waits(turn, send):
        await never.wait()

    turns = server(waits)
    caller = Caller(turns)
    reading = asyncio.ensure_future(caller.next())
    caller.send(open=[turn(1)], cancel=[1])
    await asyncio.sleep(0.05)
    assert (turns.started, turns.running) == (0, 0)  # cancelled before it began
    reading.cancel()


async def test_a_draining_stream_ends_when_its_last_turn_ended_while_a_message_was_written():
    turns = server()
    caller = Caller(turns)
    caller.send(open=[turn(1)])
    assert await caller.next() == [(1, "chunk")]  # being written: turn 1 waits
    caller.send(open=[turn(2, whole=True)])
    await asyncio.sleep(0.05)  # turn 2 runs and ends meanwhile
    await turns.drain()
    assert await caller.next() == [(2, "chunk"), (2, "end 0")]
    await asyncio.sleep(0.05)  # turn 1 ends while that message is written: its end and its wake come together
    assert await caller.next() == [(1, "end 0")]
    with pytest.raises(StopAsyncIteration):  # nothing runs and no turn may start: the stream ends
        await caller.next()


async def test_a_draining_stream_refuses_new_turns_as_worth_opening_again():
    turns = server()
    caller = Caller(turns)
    await turns.drain()
    caller.send(open=[turn(1)])
    response = await asyncio.wait_for(anext(caller.responses), 10)
    (message,) = response.messages
    assert message.end.again and message.end.code == 14 and message.end.message == "going away"  # UNAVAILABLE


async def test_what_queued_up_goes_out_in_messages_of_bounded_size(monkeypatch):
    from services.common import channels

    monkeypatch.setattr(channels, "BATCH_BYTES", 1000)

    async def big(turn, send):
        send(llm_pb.ChatResponse(content_delta="x" * 600))  # each alone fits; together they would not

    turns = server(big)
    caller = Caller(turns)
    caller.send(open=[turn(i) for i in range(1, 5)])
    await asyncio.sleep(0.05)
    seen = []
    while len(seen) < 8:  # four chunks and four ends
        response = await asyncio.wait_for(anext(caller.responses), 10)
        assert response.ByteSize() <= 1000 + 700  # the budget, overshot by one message at most
        seen += [(m.id, m.WhichOneof("kind")) for m in response.messages]
    assert sorted(seen) == sorted([(i, kind) for i in range(1, 5) for kind in ("chunk", "end")])


async def test_a_chunk_larger_than_a_message_may_be_fails_its_own_turn_only(monkeypatch):
    from services.common.turns import server as turn_server

    monkeypatch.setattr(turn_server, "MAX_MESSAGE_BYTES", 1000)

    async def sized(turn, send):
        await send(llm_pb.ChatResponse(content_delta="x" * (5000 if turn.id == 1 else 10)))

    turns = server(sized)
    caller = Caller(turns)
    caller.send(open=[turn(1), turn(2)])
    seen = []
    while len(seen) < 3:
        seen += await caller.next()
    assert sorted(seen) == [(1, "end 8"), (2, "chunk"), (2, "end 0")]  # RESOURCE_EXHAUSTED, as a call's would be


async def test_a_cancel_from_inside_the_work_ends_the_turn_instead_of_leaving_its_caller_waiting():
    async def cancelled_inside(turn, send):
        await send(llm_pb.ChatResponse(content_delta="one"))
        gone = asyncio.get_running_loop().create_future()
        gone.cancel()
        await gone  # something the work waited on was cancelled; the turn itself was not

    turns = server(cancelled_inside)
    caller = Caller(turns)
    caller.send(open=[turn(1)])
    assert await caller.next() == [(1, "chunk")]
    assert await caller.next() == [(1, "end 1")]  # CANCELLED, told
