"""A streaming call the client cancels closes its handler at once, through the one server interceptor, and its
wrapper ends quietly when closed later from another task."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

from services.common.channels import open_channel
from services.common.interceptors import server_interceptors
from services.common.server import Binding
from services.common.testing import start_server

SERVICE = "trellis.sandbox.v1.SandboxService"


class EndlessServicer(sb_grpc.SandboxServiceServicer):
    """Streams 1 MiB chunks for ever, so a reader that stops reading leaves it blocked in a send (flow control),
    not in its own code; keeps each handler alive itself, so only an explicit close (not the garbage collector)
    can end it."""

    def __init__(self) -> None:
        self.handlers: list = []
        self.closed = asyncio.Event()

    def Execute(self, request, context):
        handler = self._stream()
        self.handlers.append(handler)
        return handler

    async def _stream(self):
        try:
            while True:
                yield sb_pb.ExecuteResponse(output=sb_pb.OutputChunk(data=b"x" * (1 << 20)))
        finally:
            self.closed.set()


async def test_a_cancelled_stream_closes_its_handler_now():
    servicer = EndlessServicer()
    server, port = await start_server([Binding(sb_grpc.add_SandboxServiceServicer_to_server, servicer, SERVICE)])
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        call = sb_grpc.SandboxServiceStub(channel).Execute(sb_pb.ExecuteRequest())
        assert len((await call.read()).output.data) == 1 << 20
        await asyncio.sleep(0.5)  # the server fills the flow-control window and waits in a send
        call.cancel()
        # Without the close the handler waits forever (it is referenced above): this bound guards a hang only.
        await asyncio.wait_for(servicer.closed.wait(), 60)
    finally:
        await channel.close()
        await server.stop(None)


class _Details:
    method = "/test.Stream/Chunks"
    invocation_metadata = ()


class _Context:
    """What the interceptor reads of a grpc.aio ServicerContext."""

    def invocation_metadata(self):
        return ()

    def code(self):
        return None

    def details(self):
        return ""


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
async def test_a_stream_closed_from_another_task_ends_quietly(traced, request, caplog):
    """A call cancelled while gRPC sends its handler's message leaves the interceptor's wrapper suspended at a
    yield; the generator's finaliser closes it later, from another task, where the request id the wrapper set
    belongs to another context. That close ends the call's bookkeeping; it must not raise (asyncio would log
    "Task exception was never retrieved" for every such call)."""
    spans = request.getfixturevalue("spans") if traced else None

    async def chunks(request, context):
        yield "first"
        yield "second"

    async def continuation(details):
        return grpc.unary_stream_rpc_method_handler(chunks)

    wrapped = await server_interceptors("test")[0].intercept_service(continuation, _Details())
    stream = wrapped.unary_stream(None, _Context())

    async def first():
        return await stream.__anext__()

    assert await asyncio.create_task(first()) == "first"  # the request's own task
    await asyncio.create_task(stream.aclose())  # the finaliser's
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    if spans is not None:
        assert [s.name for s in spans.get_finished_spans()] == ["test.Stream/Chunks"]
