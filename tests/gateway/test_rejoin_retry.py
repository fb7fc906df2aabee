"""A rejoin (Last-Event-ID, WatchRun) follows a run through a replica going away (gateway/orchestrator.py,
`Orchestrator._rejoin`): UNAVAILABLE is asked again after the last event passed on, within about two leases;
any other status, or UNAVAILABLE past that bound, ends it as before."""

from __future__ import annotations

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import events_pb2

from gateway.errors import GatewayError
from gateway.orchestrator import Orchestrator
from services.common.testing import Binding, start_server


def delta(seq: int, text: str) -> events_pb2.RunEvent:
    return events_pb2.RunEvent(run_id="r1", node_id="Message:m", seq=seq, message_delta=events_pb2.MessageDelta(content=text))


class Canvas(canvas_grpc.CanvasServiceServicer):
    """WatchRun answers from `script`: per call, the events to send, then the status to end with (None: OK)."""

    def __init__(self, script: list[tuple[list[int], grpc.StatusCode | None]]) -> None:
        self.script = script
        self.asked: list[int] = []  # after_seq of each call

    async def WatchRun(self, request, context):
        self.asked.append(request.after_seq)
        seqs, status = self.script.pop(0) if self.script else ([], grpc.StatusCode.UNAVAILABLE)
        for seq in seqs:
            assert seq > request.after_seq
            yield delta(seq, f"t{seq} ")
        if status is not None:
            await context.abort(status, "the replica went away")


@pytest.fixture
async def canvas_server():
    servers = []

    async def start(script):
        canvas = Canvas(script)
        server, port = await start_server([Binding(canvas_grpc.add_CanvasServiceServicer_to_server, canvas,
                                                   "trellis.canvas.v1.CanvasService")])
        servers.append(server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        servers.append(channel)
        return canvas, Orchestrator(channel, rpc_timeout_s=5, run_timeout_s=30, run_lease_s=0.5)

    yield start
    for s in reversed(servers):
        await (s.close() if isinstance(s, grpc.aio.Channel) else s.stop(None))


async def rejoin(orch: Orchestrator, last_event_id: str) -> list[int]:
    seen = []
    async with orch.run(canvas_pb.RunRequest(tenant_id="t1"), last_event_id=last_event_id, merge=False) as events:
        async for event in events:
            seen.append(event.seq)
    return seen


async def test_unavailable_is_asked_again_after_the_last_event_passed_on(canvas_server) -> None:
    canvas, orch = await canvas_server([([3, 4], grpc.StatusCode.UNAVAILABLE), ([], grpc.StatusCode.UNAVAILABLE),
                                        ([5, 6], None)])
    assert await rejoin(orch, "r1:2") == [3, 4, 5, 6]
    assert canvas.asked == [2, 4, 4]


async def test_unavailable_at_the_first_read_is_asked_again_too(canvas_server) -> None:
    canvas, orch = await canvas_server([([], grpc.StatusCode.UNAVAILABLE), ([1], None)])
    assert await rejoin(orch, "r1:0") == [1]


async def test_another_status_ends_the_rejoin_at_once(canvas_server) -> None:
    canvas, orch = await canvas_server([([], grpc.StatusCode.NOT_FOUND)])
    with pytest.raises(GatewayError) as err:
        await rejoin(orch, "r1:0")
    assert err.value.code is grpc.StatusCode.NOT_FOUND and canvas.asked == [0]


async def test_unavailable_past_two_leases_is_answered(canvas_server) -> None:
    canvas, orch = await canvas_server([])  # unavailable for ever
    with pytest.raises(GatewayError) as err:
        await rejoin(orch, "r1:0")
    assert err.value.code is grpc.StatusCode.UNAVAILABLE
    assert 2 <= len(canvas.asked) < 40  # asked again (at least once), with backoff: no tight loop over two leases
