"""RunTurnService (internal, trellis.canvas.internal.v1): the gateway's runs as turns on shared streams, each
served as the Run call it stands for (services/common/turns/, docs/transport.md)."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from trellis.canvas.internal.v1 import run_turn_service_pb2 as turn_pb
from trellis.canvas.internal.v1 import run_turn_service_pb2_grpc as turn_grpc

from services.common.errors import DeadlineExceeded
from services.common.turns import Send, TurnServer, TurnTypes
from services.orchestrator.api.convert import numbered_to_proto, run_spec_from_proto
from services.orchestrator.runs.manager import RunManager

SERVICE_LABEL = "orchestrator"  # the `service` of its metrics (its server's name), for the turns it counts as Run calls
RUN_METHOD = "/trellis.canvas.v1.CanvasService/Run"
_TURN_TYPES = TurnTypes(turn_pb.RunTurnsResponse, turn_pb.RunTurnMessage, turn_pb.RunTurnEnd)


class RunTurnServicer(turn_grpc.RunTurnServiceServicer):
    def __init__(self, runs: RunManager) -> None:
        self.runs = runs
        # The streams (`turns.drain` on shutdown): each turn as a Run call.
        self.turns = TurnServer(_TURN_TYPES, self._turn, lambda turn: RUN_METHOD, service=SERVICE_LABEL,
                                shutting_down="the orchestrator is shutting down")

    async def RunTurns(self, requests, context):
        async for response in self.turns.serve(requests):
            yield response

    async def _turn(self, turn: turn_pb.RunTurn, send: Send) -> None:
        """One Run turn: its events, as Run streams them; past its deadline, cancelled as a Run call would be."""
        deadline = asyncio.timeout(turn.timeout_s or None)
        try:
            async with deadline:
                async with aclosing(self.runs.execute(run_spec_from_proto(turn.request))) as events:
                    async for item in events:
                        await send(numbered_to_proto(item))
        except TimeoutError:
            if deadline.expired():
                raise DeadlineExceeded("Deadline Exceeded") from None
            raise
