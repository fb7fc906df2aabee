"""The turn client's own rules (services/common/turn_client.py): how many lanes a target has, and a closed
client letting go of its streams. Turns themselves are tested through their users: tests/services/clients/
test_llm_turns.py and tests/e2e/test_run_turns.py."""

from __future__ import annotations

import asyncio

import pytest

from services.clients import LlmClient
from services.clients._rpc import RetryPolicy
from services.clients.llm_models import Message
from services.common.turn_client import MAX_LANES, listed_replicas, resolved_replicas
from tests.support.llm_gateway import llm_gateway

SCRIPTS = {"chat": {"echo": ["you said {last_user}"]}}


@pytest.mark.parametrize(("target", "lanes"), [
    ("ipv4:127.0.0.1:50051,127.0.0.1:51051", 2),  # trellis up's replicas
    ("ipv4:127.0.0.1:50051", 1),
    ("ipv6:[::1]:50051,[::1]:51051,[::1]:52051", 3),
    ("127.0.0.1:50051", 1),
    ("[::1]:50051", 1),
    ("unix:/run/trellis.sock", 1),  # a scheme of its own: one address
    ("orchestrator:50051", None),  # a name: resolved, as round_robin resolves it
    ("dns:///orchestrator.trellis.svc:50051", None),
    ("ipv4:" + ",".join(f"10.0.0.{i}:50051" for i in range(100)), MAX_LANES),
])
def test_the_lanes_of_a_target_are_the_replicas_it_lists(target, lanes):
    assert listed_replicas(target) == lanes


async def test_a_name_has_as_many_lanes_as_it_resolves_to_and_one_when_it_does_not_resolve():
    assert await resolved_replicas("localhost:50051") == len(
        {info[4][:2] for info in await asyncio.get_running_loop().getaddrinfo("localhost", 50051, type=1)})
    assert await resolved_replicas("no-such-host.invalid:50051") == 1
    assert await resolved_replicas("unix:/run/trellis.sock") == 1


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
        again = LlmClient.connect(llm.addr, retry=RetryPolicy(attempts=1))  # the first try must reach it
        try:
            reply = [d.content async for d in again.stream_chat("echo@Scripted", [Message("user", "b")], timeout=10)]
            assert "".join(reply) == "you said b"
        finally:
            await again.close()


async def test_a_turn_whose_deadline_passed_fails_at_once_and_opens_nothing():
    """A timeout of 0 would mean none at all to the server: the turn is not sent."""
    import grpc
    from trellis.llm.v1 import llm_service_pb2 as llm_pb

    from services.common.turn_client import ClientTurnTypes, TurnClient

    def no_stream():
        raise AssertionError("a stream was opened for a turn past its deadline")

    turns = TurnClient(no_stream, ClientTurnTypes(llm_pb.ChatTurnsRequest, llm_pb.ChatTurn, llm_pb.ChatTurnMessage),
                       peer="LLM gateway")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await anext(turns.turn(llm_pb.ChatRequest(), asyncio.get_running_loop().time() - 1))
    assert failed.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_closed_turn_client_opens_nothing_more():
    import grpc
    from trellis.llm.v1 import llm_service_pb2 as llm_pb

    from services.common.turn_client import ClientTurnTypes, TurnClient

    def no_stream():
        raise AssertionError("a stream was opened after close")

    turns = TurnClient(no_stream, ClientTurnTypes(llm_pb.ChatTurnsRequest, llm_pb.ChatTurn, llm_pb.ChatTurnMessage),
                       peer="LLM gateway")
    await turns.close()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await anext(turns.turn(llm_pb.ChatRequest(), None))
    assert failed.value.code() == grpc.StatusCode.CANCELLED and turns.streams == []
