"""Turns: calls of one method carried on shared long-lived streams, Trellis's one protocol of its own on top of
gRPC, and the transport of two hops (gateway -> orchestrator runs, orchestrator -> LLM gateway chats). It stays
because it is measured to pay (docs/transport.md); it is internal: its messages are in their own proto packages
(trellis.canvas.internal.v1, trellis.llm.internal.v1), and only the typed clients use it, one code path each.

    turns = TurnClient(stub.ChatTurns, ClientTurnTypes(...), peer="LLM gateway", target=channel_target(channel))
    call = turns.call(request, timeout=30, metadata=outbound_metadata())   # used as a stub's call is
    server = TurnServer(TurnTypes(...), handle, method_of, service="llm_gateway", shutting_down="...")
"""

from services.common.turns.client import ClientTurnTypes, TurnCall, TurnClient
from services.common.turns.server import Send, TurnServer, TurnTypes

__all__ = ["ClientTurnTypes", "Send", "TurnCall", "TurnClient", "TurnServer", "TurnTypes"]
