"""ChatTurnService (internal, trellis.llm.internal.v1): the orchestrator's chat turns on shared streams, each
served as the Chat call it stands for, or as Complete (`whole`) (services/common/turns/, docs/transport.md)."""

from __future__ import annotations

from contextlib import aclosing
from typing import AsyncIterator

import grpc
from trellis.llm.internal.v1 import chat_turn_service_pb2 as turn_pb
from trellis.llm.internal.v1 import chat_turn_service_pb2_grpc as turn_grpc

from services.common.server import Binding
from services.common.turns import Send, TurnServer, TurnTypes
from services.llm_gateway.server import LlmServicer

SERVICE_NAME = turn_pb.DESCRIPTOR.services_by_name["ChatTurnService"].full_name
SERVICE_LABEL = "llm_gateway"  # the `service` of its metrics (its server's name), for the turns it counts as calls
CHAT_METHOD = "/trellis.llm.v1.LlmService/Chat"
COMPLETE_METHOD = "/trellis.llm.v1.LlmService/Complete"
_TURN_TYPES = TurnTypes(turn_pb.ChatTurnsResponse, turn_pb.ChatTurnMessage, turn_pb.ChatTurnEnd)


class ChatTurnServicer(turn_grpc.ChatTurnServiceServicer):
    """Serves each turn with the LlmServicer's own Chat or Complete work."""

    def __init__(self, llm: LlmServicer) -> None:
        self.llm = llm
        # The streams (`turns.drain` on shutdown): each turn as a Chat call, or a Complete call (`whole`).
        self.turns = TurnServer(_TURN_TYPES, self._turn, lambda turn: COMPLETE_METHOD if turn.whole else CHAT_METHOD,
                                service=SERVICE_LABEL, shutting_down="the LLM gateway is shutting down")

    def binding(self) -> Binding:
        return Binding(turn_grpc.add_ChatTurnServiceServicer_to_server, self, SERVICE_NAME)

    async def ChatTurns(self, requests: AsyncIterator[turn_pb.ChatTurnsRequest], context: grpc.aio.ServicerContext
                        ) -> AsyncIterator[turn_pb.ChatTurnsResponse]:
        async for response in self.turns.serve(requests):
            yield response

    async def _turn(self, turn: turn_pb.ChatTurn, send: Send) -> None:
        timeout_s = turn.timeout_s or None
        if turn.whole:
            send(await self.llm.whole(turn.request, timeout_s))  # its end goes in the same message
            return
        async with aclosing(self.llm.chunks(turn.request, timeout_s)) as chunks:  # a cancel closes it at once
            async for chunk in chunks:
                await send(chunk)
