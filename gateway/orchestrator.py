"""The gateway's calls into the orchestrator: its service stubs on one channel, each call with the configured timeout,
and its runs as turns on shared streams (trellis.canvas.internal.v1.RunTurnService, through
services/common/turns/; docs/transport.md), each used as the Run call it stands for: one code path with WatchRun.
A run is not started twice: the one repetition is the transport's, of a turn no replica started.

    orch = request.app[ORCHESTRATOR]
    resp = await orch.unary(orch.agents.GetAgent, agent_pb.GetAgentRequest(tenant_id=t, agent_id=a))
    async with orch.run(run_request) as events:   # errors before the first event raise GatewayError here
        async for ev in events: ...                 # answer deltas come merged when the client reads slowly
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing, asynccontextmanager
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable

import grpc
from aiohttp import web
from trellis.canvas.internal.v1 import run_turn_service_pb2 as turn_pb
from trellis.canvas.internal.v1 import run_turn_service_pb2_grpc as turn_grpc
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import attachment_service_pb2_grpc as attachment_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import events_pb2
from trellis.canvas.v1 import mcp_service_pb2_grpc as mcp_grpc
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc
from trellis.canvas.v1 import webhook_trigger_service_pb2_grpc as webhook_trigger_grpc

from gateway.errors import GatewayError, from_rpc_error
from services.common.channels import channel_target, outbound_metadata
from services.common.coalesce import coalesce
from services.common.turns import ClientTurnTypes, TurnClient

log = logging.getLogger(__name__)

_TURN_TYPES = ClientTurnTypes(turn_pb.RunTurnsRequest, turn_pb.RunTurn, turn_pb.RunTurnMessage)


class RunStream:
    """A run's events. `start()` reads the first event, so a bad request (unknown agent, invalid DSL) fails
    before any HTTP header is sent and gets a plain error response in the route's dialect."""

    def __init__(self, events: AsyncGenerator[events_pb2.RunEvent, None]) -> None:
        self._events = events
        self._first: events_pb2.RunEvent | None = None
        self._done = False

    async def start(self) -> None:
        try:
            self._first = await self._events.__anext__()
        except StopAsyncIteration:
            self._done = True

    def __aiter__(self) -> "RunStream":
        return self

    async def __anext__(self) -> events_pb2.RunEvent:
        if self._first is not None:
            event, self._first = self._first, None
            return event
        if self._done:
            raise StopAsyncIteration
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Stops the run's call or turn (a no-op once the run ended)."""
        await self._events.aclose()


async def _call_events(call: Any) -> AsyncGenerator[events_pb2.RunEvent, None]:
    """The events of a run's turn or a WatchRun call; a failure as the GatewayError for its status."""
    try:
        while (event := await call.read()) is not grpc.aio.EOF:
            yield event
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc) from None
    finally:
        call.cancel()  # a no-op once the call has ended


def merge_run_events(a: events_pb2.RunEvent, b: events_pb2.RunEvent) -> events_pb2.RunEvent | None:
    """Two answer deltas of the same node as one event (services/common/coalesce.py), else None.

    A new event each time: `a` lives in the memory of the message it came in (with other runs' events, on a
    shared stream), and a string set in place there is kept until that message is freed, so merging a slow
    client's thousands of deltas in place grew with the square of its text. Think markers stay separate: each
    dialect renders them as their own event."""
    if a.WhichOneof("kind") != "message_delta" or b.WhichOneof("kind") != "message_delta":
        return None
    ma, mb = a.message_delta, b.message_delta
    if (ma.start_to_think or ma.end_to_think or mb.start_to_think or mb.end_to_think or a.node_id != b.node_id
            or a.path != b.path or a.run_id != b.run_id):
        return None
    merged = events_pb2.RunEvent()
    merged.CopyFrom(a)
    merged.message_delta.content = ma.content + mb.content
    merged.seq = b.seq  # a client that saw the merged event has seen everything up to b
    return merged


class EventIds:
    """The SSE `id` of what was sent last, `<run id>:<seq>`: a client that lost the stream sends it back as
    `Last-Event-ID` and gets the rest of the run (`Orchestrator.run(..., last_event_id=...)`)."""

    def __init__(self, events: AsyncIterator[events_pb2.RunEvent]) -> None:
        self._events = events
        self.last = ""

    def __aiter__(self) -> "EventIds":
        return self

    async def __anext__(self) -> events_pb2.RunEvent:
        event = await self._events.__anext__()
        if event.seq:
            self.last = f"{event.run_id}:{event.seq}"
        return event


def parse_event_id(value: str) -> tuple[str, int]:
    """`<run id>:<seq>` from a Last-Event-ID header, or a clear error naming the header."""
    run_id, _, seq = value.strip().rpartition(":")
    if not run_id or not (seq.isascii() and seq.isdigit()) or int(seq) >= 2**63:
        raise GatewayError(f"invalid Last-Event-ID {value!r}: expected '<run id>:<seq>' as sent in the stream's id lines",
                           param="Last-Event-ID")
    return run_id, int(seq)


class Orchestrator:
    def __init__(self, channel: grpc.aio.Channel, *, rpc_timeout_s: float, run_timeout_s: float,
                 run_lease_s: float = 10.0) -> None:
        self.agents = agent_grpc.AgentServiceStub(channel)
        self.sessions = session_grpc.SessionServiceStub(channel)
        self.canvas = canvas_grpc.CanvasServiceStub(channel)
        self.mcp = mcp_grpc.McpServerServiceStub(channel)
        self.attachments = attachment_grpc.AttachmentServiceStub(channel)
        self.webhook_triggers = webhook_trigger_grpc.WebhookTriggerServiceStub(channel)  # RAGFlow's webhook trigger
        self.rpc_timeout_s = rpc_timeout_s
        self.run_timeout_s = run_timeout_s
        self.run_lease_s = run_lease_s  # the orchestrator's run lease: how long a rejoin waits for a new owner
        # Runs go on shared streams, one per orchestrator replica (services/common/turns/): `turns.call` is used
        # as `canvas.Run` would be.
        self.turns = TurnClient(turn_grpc.RunTurnServiceStub(channel).RunTurns, _TURN_TYPES, peer="orchestrator",
                                target=channel_target(channel))

    async def unary(self, method: Callable[..., Awaitable[Any]], request: Any, *, extra_s: float = 0.0) -> Any:
        """AioRpcError propagates: `gateway.endpoint` renders it in the route's dialect. `extra_s`: what the call
        may take beyond the configured timeout, for work it bounds itself (listing an MCP server's tools)."""
        return await method(request, timeout=self.rpc_timeout_s + extra_s, metadata=outbound_metadata())

    @asynccontextmanager
    async def run(self, request: canvas_pb.RunRequest, *, last_event_id: str = "",
                  merge: bool = True) -> AsyncIterator[EventIds]:
        """Start the run, or with `last_event_id` (the Last-Event-ID header) rejoin the run it names after
        that event: the events missed, then the live tail. `merge=False` for a caller that answers once at the
        end: with nothing sent meanwhile there is nothing to merge, and no reader task to pay for."""
        ready = None  # a turn says when its next event is here already: merged as it is taken, no reader task
        if last_event_id:
            run_id, seq = parse_event_id(last_event_id)
            events = self._rejoin(request.tenant_id, run_id, seq)
        else:
            call = self.turns.call(request, timeout=self.run_timeout_s, metadata=outbound_metadata())
            events, ready = _call_events(call), call.ready
        stream = RunStream(events)
        try:
            await stream.start()
            if not merge:
                yield EventIds(stream)
                return
            # What arrives while the previous event is being written to the client goes out as one event.
            async with aclosing(coalesce(stream, merge_run_events, ready=ready)) as merged:
                yield EventIds(merged)
        finally:
            # A no-op once the run ended. On a client disconnect aiohttp cancels the handler, and this
            # cancels the turn at once, so the orchestrator stops the run (and its LLM request) too.
            await stream.aclose()

    async def _rejoin(self, tenant: str, run_id: str, seq: int) -> AsyncGenerator[events_pb2.RunEvent, None]:
        """The run's events after `seq` (WatchRun), followed through a replica going away.

        A WatchRun answers UNAVAILABLE when the replica serving it dies (or is gone before it answers); the run
        is not lost with it: its events are in Redis, and another replica takes it over within a lease. So the
        call is made again, after the last event it passed on, while the run exists, for at most two leases
        since the last event came (a run no replica takes over by then is answered "unavailable"). The channel
        picks a live replica for the next call (round_robin). Every other status ends the rejoin as before;
        so does UNAVAILABLE once the bound is spent."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 2 * self.run_lease_s
        delay = 0.05
        while True:
            call = self.canvas.WatchRun(canvas_pb.WatchRunRequest(tenant_id=tenant, run_id=run_id, after_seq=seq),
                                        timeout=self.run_timeout_s, metadata=outbound_metadata())
            try:
                async for event in _call_events(call):
                    if event.seq:
                        seq = event.seq
                        give_up, delay = loop.time() + 2 * self.run_lease_s, 0.05
                    yield event
                return
            except GatewayError as exc:
                if exc.code is not grpc.StatusCode.UNAVAILABLE or loop.time() + delay >= give_up:
                    raise
                log.info("rejoining run %s after seq %d: %s; trying again", run_id, seq, exc.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0, self.run_lease_s / 4)

    async def tenant_admission(self, tenant: str) -> canvas_pb.GetTenantAdmissionResponse:
        """The tenant's admission figures over every orchestrator replica, and its limits (GetTenantAdmission:
        any replica answers for all of them)."""
        return await self.unary(self.canvas.GetTenantAdmission, canvas_pb.GetTenantAdmissionRequest(tenant_id=tenant))

    async def aclose(self) -> None:
        """Ends the runs still running on shared streams (before the channel closes)."""
        await self.turns.close()

ORCHESTRATOR = web.AppKey("orchestrator", Orchestrator)
