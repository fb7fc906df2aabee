"""SandboxServicer: the thin gRPC adapter over the executor."""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

import grpc
from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

from services.common.errors import Unavailable
from services.common.server import Binding
from services.sandbox.config import SandboxConfig
from services.sandbox.convert import event_to_proto, request_from_proto
from services.sandbox.executor import Executor
from services.sandbox.models import ExecResult

log = logging.getLogger(__name__)

SERVICE_NAME = sb_pb.DESCRIPTOR.services_by_name["SandboxService"].full_name


class SandboxServicer(sb_grpc.SandboxServiceServicer):
    """Runs code on `executor` (app.create_executor, checked at start-up, then `started`).

    The server listens while the sandbox starts (health says NOT_SERVING meanwhile): a run that comes then waits
    for the start-up to end, within its deadline, and runs. It is not answered UNAVAILABLE, which a client takes
    for the sandbox's own answer, after work of its own, and does not send again (services/clients/_rpc.py). A
    start-up that fails (`failed`) fails the waiting runs with its reason."""

    def __init__(self, cfg: SandboxConfig, executor: Executor | None = None) -> None:
        self.cfg = cfg
        self.executor = executor
        self._failure: str | None = None
        self._settled = asyncio.Event()  # the start-up has ended, either way
        if executor is not None:
            self._settled.set()

    def started(self, executor: Executor) -> None:
        self.executor = executor
        self._settled.set()

    def failed(self, reason: str) -> None:
        self._failure = reason
        self._settled.set()

    async def Execute(self, request: sb_pb.ExecuteRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[sb_pb.ExecuteResponse]:
        req = request_from_proto(request, self.cfg)
        if self.executor is None:
            await self._settled.wait()  # the call's deadline bounds it (grpc cancels the handler)
            if self.executor is None:
                raise Unavailable(f"sandbox: start-up failed: {self._failure}")
        async for event in self.executor.execute(req):
            if isinstance(event, ExecResult):
                log.info(
                    "sandbox: %s run ok=%s kind=%s wall_ms=%d cpu_ms=%d",
                    req.language.value,
                    event.ok,
                    event.error.kind.value if event.error else "-",
                    event.wall_time_ms,
                    event.cpu_time_ms,
                )
            yield event_to_proto(event)

    def binding(self) -> Binding:
        return Binding(sb_grpc.add_SandboxServiceServicer_to_server, self, SERVICE_NAME)
