"""The turn client's own rules (services/common/turns/client.py): a closed client letting go of its streams, a
turn past its deadline. Turns themselves are tested through their users: tests/services/clients/
test_llm_turns.py and tests/e2e/test_run_turns.py; the lanes in test_lanes.py."""

from __future__ import annotations


import pytest

from services.clients import LlmClient
from services.clients._rpc import RetryPolicy
from services.clients.llm_models import Message
from tests.support.llm_gateway import llm_gateway

SCRIPTS = {"chat": {"echo": ["you said {last_user}"]}}


async def test_a_closed_client_lets_go_of_its_streams_so_a_new_server_on_that_port_is_reached_at_once():
    """grpc shares connections between channels to the same address: a closed client that kept its finished
    stream kept the old connection's reconnect backoff alive, and a new channel to a new server on the same port
    failed at once with "connection refused" (an orchestrator restarted on its port, a test's next server)."""
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr)
        said = [d.content async for d in client.stream_chat("echo@Scripted", [Message("user", "a")])]
        assert "".join(said) == "you said a"
        await client.close()
        await llm.stop()
        await llm.start()
        again = LlmClient.connect(llm.addr, retry=RetryPolicy(budget_s=0))  # the first try must reach it
        try:
            reply = [d.content async for d in again.stream_chat("echo@Scripted", [Message("user", "b")], timeout=10)]
            assert "".join(reply) == "you said b"
        finally:
            await again.close()


async def test_a_turn_whose_deadline_passed_fails_at_once_and_opens_nothing():
    """A timeout of 0 would mean none at all to the server: the turn is not sent."""
    import grpc
    from trellis.llm.internal.v1 import chat_turn_service_pb2 as turn_pb
    from trellis.llm.v1 import llm_service_pb2 as llm_pb

    from services.common.turns import ClientTurnTypes, TurnClient

    def no_stream():
        raise AssertionError("a stream was opened for a turn past its deadline")

    turns = TurnClient(no_stream, ClientTurnTypes(turn_pb.ChatTurnsRequest, turn_pb.ChatTurn, turn_pb.ChatTurnMessage),
                       peer="LLM gateway")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await anext(turns.call(llm_pb.ChatRequest(), timeout=0.0))
    assert failed.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_closed_turn_client_opens_nothing_more():
    import grpc
    from trellis.llm.internal.v1 import chat_turn_service_pb2 as turn_pb
    from trellis.llm.v1 import llm_service_pb2 as llm_pb

    from services.common.turns import ClientTurnTypes, TurnClient

    def no_stream():
        raise AssertionError("a stream was opened after close")

    turns = TurnClient(no_stream, ClientTurnTypes(turn_pb.ChatTurnsRequest, turn_pb.ChatTurn, turn_pb.ChatTurnMessage),
                       peer="LLM gateway")
    await turns.close()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await anext(turns.call(llm_pb.ChatRequest()))
    assert failed.value.code() == grpc.StatusCode.CANCELLED and turns.streams == []
