"""The LLM client's turns on shared streams (services/clients/llm.py over services/common/turns/, and the
gateway's side in services/llm_gateway/chat_turns.py), against a real llm_gateway: each turn behaves as a Chat
(or Complete) call of its own."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from prometheus_client import REGISTRY
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.clients.llm_models import Message
from services.common.errors import DeadlineExceeded, NotFound, Unavailable, Unimplemented
from services.common import channels
from services.common.testing import start_server
from services.common.turns import client as turn_client
from services.llm_gateway.chat_turns import ChatTurnServicer
from services.llm_gateway.server import LlmServicer
from tests.support.llm_gateway import llm_gateway, user

SCRIPTS = {"chat": {"echo": ["you said {last_user}"],
                    "slow": [{"reply": "one two three four five six", "chunk_delay_s": 0.2}],
                    "late": [{"reply": "too late", "delay_s": 30}],
                    "tools": [{"tool_calls": [{"name": "calc", "arguments": {"expr": "6*7"}, "id": "c1"},
                                              {"name": "web", "arguments": {"q": "trellis"}, "id": "c2"}]}]}}


def chat_calls(code: str, method: str = "Chat") -> int:
    return int(REGISTRY.get_sample_value("trellis_grpc_requests_total", {
        "service": "llm_gateway", "method": f"/trellis.llm.v1.LlmService/{method}", "code": code}) or 0)


def current(client):
    """The client's one stream (one gateway: one lane)."""
    (stream,) = client.turns.streams
    return stream


async def text(client, model: str, said: str, **kwargs) -> str:
    return "".join([d.content async for d in client.stream_chat(model, [Message("user", said)], **kwargs)])


async def test_concurrent_turns_share_one_stream_and_each_gets_its_own_answer():
    async with llm_gateway(SCRIPTS) as llm:
        before = chat_calls("OK")
        answers = await asyncio.gather(*(text(llm.client, "echo@Scripted", f"number {i}") for i in range(50)))
        assert answers == [f"you said number {i}" for i in range(50)]
        assert current(llm.client).opened == 50  # one ChatTurns stream carried them all
        assert chat_calls("OK") - before == 50  # each counted as the Chat call it stands for


async def test_a_whole_turn_rides_the_stream_and_gives_what_complete_gives():
    async with llm_gateway(SCRIPTS) as llm:
        before = chat_calls("OK", "Complete")
        result = await llm.client.chat("tools@Scripted", [Message("user", "go")])
        direct = await llm.stub.Complete(llm_pb.ChatRequest(model_id="tools@Scripted", messages=[user("go")]))
        assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == \
            [("c1", "calc", {"expr": "6*7"}), ("c2", "web", {"q": "trellis"})]
        assert [(d.id, d.name, d.arguments_delta) for d in direct.tool_call_deltas] == \
            [(c.id, c.name, c.arguments) for c in result.tool_calls]
        assert result.finish_reason == "tool_calls" and result.model == direct.model
        assert current(llm.client).opened == 1  # on the stream, not a call
        assert chat_calls("OK", "Complete") - before == 2  # the turn and the direct call, each a Complete


async def test_a_turn_the_caller_stops_reading_is_cancelled_at_the_gateway_and_the_stream_goes_on():
    async with llm_gateway(SCRIPTS) as llm:
        cancelled = chat_calls("CANCELLED")
        stream = llm.client.stream_chat("slow@Scripted", [Message("user", "x")])
        first = await anext(stream)
        await stream.aclose()  # the caller breaks out after one chunk
        assert first.content.strip() == "one"
        for _ in range(2000):  # until the gateway has the cancel (no time limit: the loop turns)
            if chat_calls("CANCELLED") > cancelled:
                break
            await asyncio.sleep(0.001)
        assert chat_calls("CANCELLED") == cancelled + 1
        assert await text(llm.client, "echo@Scripted", "after") == "you said after"


async def test_a_turn_past_its_deadline_fails_with_deadline_exceeded_and_the_others_are_untouched():
    async with llm_gateway(SCRIPTS) as llm:
        late = asyncio.ensure_future(text(llm.client, "late@Scripted", "x", timeout=0.5))
        assert await text(llm.client, "echo@Scripted", "meanwhile") == "you said meanwhile"
        with pytest.raises(DeadlineExceeded):
            await asyncio.wait_for(late, 20)
        assert await text(llm.client, "echo@Scripted", "after") == "you said after"


async def test_a_turn_the_gateway_refuses_fails_with_its_typed_error_and_the_stream_goes_on():
    async with llm_gateway(SCRIPTS) as llm:
        with pytest.raises(NotFound, match="nosuch"):
            await text(llm.client, "nosuch@Scripted", "x")
        stream = current(llm.client)
        assert await text(llm.client, "echo@Scripted", "after") == "you said after"
        assert current(llm.client) is stream


async def test_a_gateway_that_stops_mid_turn_fails_that_turn_and_the_next_turn_reaches_it_again():
    async with llm_gateway(SCRIPTS) as llm:
        stream = llm.client.stream_chat("slow@Scripted", [Message("user", "x")])
        assert (await anext(stream)).content.strip() == "one"
        await llm.stop()
        with pytest.raises(Unavailable, match="llm_gateway"):  # its chunks came already: not asked again
            async for _ in stream:
                pass
        await llm.start()
        assert await text(llm.client, "echo@Scripted", "back") == "you said back"


async def test_streams_are_replaced_after_a_number_of_turns_and_the_old_ones_closed(monkeypatch):
    monkeypatch.setattr(turn_client, "ROTATE_AFTER_TURNS", 3)
    async with llm_gateway(SCRIPTS) as llm:
        streams = []
        for i in range(7):
            assert await text(llm.client, "echo@Scripted", str(i)) == f"you said {i}"
            if current(llm.client) not in streams:
                streams.append(current(llm.client))
        assert [s.opened for s in streams] == [3, 3, 1]
        for old in streams[:2]:  # retired and idle: their calls end
            await asyncio.wait_for(old.call.code(), 10)
            assert old.call.done()
        assert not REGISTRY.get_sample_value("trellis_grpc_requests_total", {  # the carrier is not a call in the metrics
            "service": "llm_gateway", "method": "/trellis.llm.internal.v1.ChatTurnService/ChatTurns", "code": "OK"})


async def test_a_gateway_without_the_turn_service_fails_each_turn_as_a_call_of_an_unknown_method_would():
    """No second code path: every gateway of this version serves ChatTurnService (docs/transport.md)."""
    async with llm_gateway(SCRIPTS) as llm:
        await llm.stop()
        llm.server, _ = await start_server([LlmServicer(llm.gateway).binding()], service="llm_gateway", port=llm.port)
        with pytest.raises(Unimplemented):
            await text(llm.client, "echo@Scripted", "old")
        with pytest.raises(Unimplemented):
            await llm.client.chat("echo@Scripted", [Message("user", "whole")])


async def test_a_turn_carries_the_callers_request_id_to_the_gateway(monkeypatch):
    from services.common import context as ctxvars
    from services.llm_gateway.providers.scripted import ScriptedProvider

    seen: list[str] = []
    real = ScriptedProvider.stream

    def spy(self, call, *, timeout):
        seen.append(ctxvars.request_id.get())
        return real(self, call, timeout=timeout)

    monkeypatch.setattr(ScriptedProvider, "stream", spy)
    async with llm_gateway(SCRIPTS) as llm:
        token = ctxvars.request_id.set("req-turn-1")
        try:
            assert await text(llm.client, "echo@Scripted", "hi") == "you said hi"
        finally:
            ctxvars.request_id.reset(token)
    assert seen == ["req-turn-1"]


async def test_a_draining_gateway_finishes_its_turns_ends_its_streams_and_sends_new_turns_elsewhere():
    """Shutdown: the gateway's running turns finish, its streams end (so the grace period waits for turns,
    not for streams), and a turn opened meanwhile is opened again on another gateway."""
    from services.clients import LlmClient

    async with llm_gateway(SCRIPTS) as llm:
        draining, other = ChatTurnServicer(LlmServicer(llm.gateway)), ChatTurnServicer(LlmServicer(llm.gateway))
        servers = [await start_server([s.llm.binding(), s.binding()], service="llm_gateway") for s in (draining, other)]
        client = LlmClient.connect(f"ipv4:127.0.0.1:{servers[0][1]},127.0.0.1:{servers[1][1]}")
        try:
            await asyncio.gather(*(client.list_models() for _ in range(4)))  # both gateways connected
            slow = client.stream_chat("slow@Scripted", [Message("user", "x")])
            first = await anext(slow)
            (drained_call,) = [stream.call for stream in client.turns.streams if stream.turns]
            if other.turns.running:  # the turn went to the other one: swap names
                draining, other = other, draining
                servers.reverse()
            await draining.turns.drain()
            for i in range(4):  # whichever stream each is opened on, every turn is taken by the other gateway
                assert await text(client, "echo@Scripted", f"elsewhere {i}") == f"you said elsewhere {i}"
            assert (draining.turns.started, other.turns.started) == (1, 4)
            stopping = asyncio.ensure_future(servers[0][0].stop(3600))
            rest = [d.content async for d in slow]
            assert "".join([first.content, *rest]) == "one two three four five six"  # finished during the drain
            # The gateway ended the stream itself once its last turn was done (OK); a stream left to the grace
            # period would have been cut by the stop instead.
            assert await asyncio.wait_for(drained_call.code(), 30) == grpc.StatusCode.OK  # (a guard against a hang)
            await stopping
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(None)


async def test_closing_the_client_ends_its_running_turns_with_an_error_instead_of_leaving_them_waiting():
    from services.clients import LlmClient
    from services.common.errors import Cancelled

    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr)
        slow = client.stream_chat("slow@Scripted", [Message("user", "x")])
        await anext(slow)
        await client.close()
        with pytest.raises(Cancelled):
            await asyncio.wait_for(anext(slow), 10)


async def test_closing_the_client_also_ends_turns_on_streams_it_no_longer_opens_turns_on(monkeypatch):
    from services.clients import LlmClient
    from services.common.errors import Cancelled

    monkeypatch.setattr(turn_client, "ROTATE_AFTER_TURNS", 1)
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr)
        slow = client.stream_chat("slow@Scripted", [Message("user", "x")])
        await anext(slow)
        assert await text(client, "echo@Scripted", "next") == "you said next"  # on a new stream: the first retired
        await client.turns.close()  # the turns alone: the channel, which would cut every call, stays open
        try:
            with pytest.raises(Cancelled):
                await asyncio.wait_for(anext(slow), 10)
        finally:
            await client.close()


async def test_a_turn_the_gateway_ends_as_unimplemented_fails_once_and_the_stream_stays_in_use(monkeypatch):
    """A turn's own UNIMPLEMENTED (a feature the gateway lacks) is its answer: not asked again."""
    tries = []

    async def unimplemented(self, request, timeout_s):
        tries.append(request.model_id)
        raise NotImplementedError("no such feature")
        yield  # (a stream of chunks)

    monkeypatch.setattr(LlmServicer, "chunks", unimplemented)
    async with llm_gateway(SCRIPTS) as llm:
        with pytest.raises(Unimplemented):
            await asyncio.wait_for(text(llm.client, "echo@Scripted", "x"), 20)
        assert tries == ["echo@Scripted"] and current(llm.client).failure is None


async def test_a_callers_cancel_leaves_the_other_turns_of_the_same_messages_alone():
    words = " ".join(f"w{i}" for i in range(2000))
    scripts = {"chat": {"long": [{"reply": words, "chunk_delay_s": 0.0002}]}}
    async with llm_gateway(scripts) as llm:
        for _ in range(3):
            leaving = llm.client.stream_chat("long@Scripted", [Message("user", "a")])
            staying = [llm.client.stream_chat("long@Scripted", [Message("user", f"b{i}")]) for i in range(3)]
            firsts = [await anext(stream) for stream in staying]
            await anext(leaving)
            await asyncio.sleep(0.01)
            await leaving.aclose()  # its caller goes away while the others' chunks share its messages

            async def rest(stream, first):
                return first.content + "".join([d.content async for d in stream])

            answers = await asyncio.gather(*(asyncio.wait_for(rest(s, f), 30) for s, f in zip(staying, firsts)))
            assert answers == [words] * 3


async def test_turns_that_queue_up_go_out_in_messages_of_bounded_size_and_one_too_large_fails_alone(monkeypatch):
    from services.common.errors import ResourceExhausted

    monkeypatch.setattr(channels, "BATCH_BYTES", 1000)
    async with llm_gateway(SCRIPTS) as llm:
        await text(llm.client, "echo@Scripted", "warm")  # the stream is open
        writes = []
        stream = current(llm.client)
        real = stream.call.write

        async def write(request):
            writes.append(request.ByteSize())
            return await real(request)

        stream.call.write = write
        prompts = [str(i) * 600 for i in range(4)]
        answers = await asyncio.gather(*(text(llm.client, "echo@Scripted", p) for p in prompts))
        assert answers == [f"you said {p}" for p in prompts]
        assert len(writes) >= 2 and all(size <= 1000 + 800 for size in writes)
        monkeypatch.setattr(turn_client, "MAX_MESSAGE_BYTES", 2000)
        with pytest.raises(ResourceExhausted, match="larger than"):
            await text(llm.client, "echo@Scripted", "x" * 5000)
        assert await text(llm.client, "echo@Scripted", "small") == "you said small"


async def test_a_whole_turn_is_closed_when_its_answer_is_returned():
    async with llm_gateway(SCRIPTS) as llm:
        await llm.client.chat("echo@Scripted", [Message("user", "whole")])
        stream = current(llm.client)
        assert stream.turns == {} and stream._cancels == []  # ended by its end, nothing to cancel
