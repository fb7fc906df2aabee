"""The LLM client's turns on shared streams (LlmService.ChatTurns): how `LlmClient.stream_chat` and
`LlmClient.chat` reach the gateway without a gRPC call per turn (services/common/turn_client.py says how, and
services/common/turn_server.py why).

A turn keeps a Chat call's behaviour, and its retry rule (services/clients/_rpc.py): a turn whose stream failed
before the turn's first chunk, while the channel was not connected, is tried again on a new stream; so is one
that a gateway refused because it shuts down (`again`). A gateway without ChatTurns gets Chat and Complete calls.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncIterator, Callable, TypeVar

import grpc
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.channels import channel_target
from services.common.turn_client import ClientTurnTypes, StreamEnded, TurnClient, TurnsUnsupported

R = TypeVar("R")

_TYPES = ClientTurnTypes(llm_pb.ChatTurnsRequest, llm_pb.ChatTurn, llm_pb.ChatTurnMessage)


class ChatTurns:
    """The turns of one LlmClient (`peer`: its `_rpc.Peer`, whose deadline, retry and error rules apply)."""

    def __init__(self, peer: Any) -> None:
        self._peer = peer
        self._turns = TurnClient(peer._stub.ChatTurns, _TYPES, peer="LLM gateway", target=channel_target(peer.channel))

    @property
    def supported(self) -> bool:
        return self._turns.supported

    async def whole(self, request: llm_pb.ChatRequest, timeout_s: float | None) -> llm_pb.ChatResponse:
        """The whole turn in one message, as Complete gives it."""
        async with aclosing(self.stream(request, _same, timeout_s, whole=True)) as chunks:  # its turn ends here
            async for whole in chunks:
                return whole
        raise AssertionError("the gateway ended a whole turn without its message")  # (it always sends one)

    async def stream(self, request: llm_pb.ChatRequest, convert: Callable[[llm_pb.ChatResponse], R],
                     timeout_s: float | None, *, whole: bool = False) -> AsyncIterator[R]:
        """The turn's chunks, as a Chat call streams them (`whole`: its one message, as Complete gives it)."""
        peer = self._peer
        deadline = peer._deadline(timeout_s)
        attempt = 1
        while True:
            if not self._turns.supported:
                if whole:
                    yield convert(await peer._unary(peer._stub.Complete, request, peer._left(deadline)))
                    return
                async with aclosing(peer._stream(peer._stub.Chat, request, convert, peer._left(deadline))) as items:
                    async for item in items:
                        yield item
                return
            started = False
            try:
                async with aclosing(self._turns.turn(request, deadline, whole=whole)) as chunks:  # a close cancels it
                    async for chunk in chunks:
                        started = True
                        yield convert(chunk)
                return
            except grpc.aio.AioRpcError as exc:
                if started:
                    raise peer.status_error(exc.code(), exc.details()) from None
                if not isinstance(exc, TurnsUnsupported):  # (that one: a call instead, above)
                    again = (self._again_soon(attempt, deadline) if isinstance(exc, StreamEnded)
                             else await peer._again(exc, attempt, deadline))
                    if not again:
                        raise peer.status_error(exc.code(), exc.details()) from None
            attempt += 1

    def _again_soon(self, attempt: int, deadline: float | None) -> bool:
        """A turn no gateway started, because its stream ended: tried again on a new stream while tries and
        time are left."""
        return attempt < self._peer.retry.attempts and (deadline is None or self._peer._left(deadline) > 0)

    async def close(self) -> None:
        await self._turns.close()


def _same(message: llm_pb.ChatResponse) -> llm_pb.ChatResponse:
    return message
