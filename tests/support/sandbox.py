"""A real sandbox service in this process on 127.0.0.1:0 (real bwrap, real runtimes), a small client for it,
and the host-side checks the sandbox tests share. The one way the tests start a sandbox:

    async with sandbox_service() as client: ...               # a SandboxClient, for `services(llm, client)`
    async with sandbox_server(servicer) as sb: sb.addr, sb.stub; await sb.stop(); await sb.start(servicer)
"""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import grpc
from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

from services.clients import SandboxClient
from services.common.testing import start_server
from services.sandbox.app import create_executor
from services.sandbox.config import SandboxConfig
from services.sandbox.limits import Limits
from services.sandbox.server import SandboxServicer

PY, JS = sb_pb.LANGUAGE_PYTHON, sb_pb.LANGUAGE_JAVASCRIPT
KIND = sb_pb.ErrorKind.Name

# Small limits keep the hostile cases quick on a 2-core machine.
TEST_DEFAULTS = Limits(
    wall_time_ms=8_000, cpu_time_ms=4_000, memory_bytes=128 << 20, max_processes=8, max_output_bytes=256 << 10, max_file_bytes=4 << 20
)
# What the components' tests run (CodeExec, the templates): more memory than the hostile cases need.
COMPONENT_LIMITS = Limits(wall_time_ms=8_000, cpu_time_ms=4_000, memory_bytes=256 << 20, max_processes=8,
                          max_output_bytes=256 << 10, max_file_bytes=4 << 20)


async def sandbox_servicer(cfg: SandboxConfig) -> SandboxServicer:
    return SandboxServicer(cfg, await create_executor(cfg))


@dataclass
class RunningSandbox:
    """A running sandbox server, its port and a stub; `stop()` then `start(servicer)` serve again on that port."""

    server: grpc.aio.Server
    port: int
    stub: sb_grpc.SandboxServiceStub

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        await self.server.stop(None)

    async def start(self, servicer: SandboxServicer) -> None:
        self.server, _ = await start_server([servicer.binding()], service="sandbox", port=self.port)


@asynccontextmanager
async def sandbox_server(servicer: SandboxServicer) -> AsyncIterator[RunningSandbox]:
    server, port = await start_server([servicer.binding()], service="sandbox")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        running = RunningSandbox(server, port, sb_grpc.SandboxServiceStub(channel))
        try:
            yield running
        finally:
            await running.server.stop(None)


@asynccontextmanager
async def sandbox_service(limits: Limits = COMPONENT_LIMITS) -> AsyncIterator[SandboxClient]:
    async with sandbox_server(await sandbox_servicer(SandboxConfig.for_tests(defaults=limits))) as sandbox:
        client = SandboxClient.connect(sandbox.addr)
        try:
            yield client
        finally:
            await client.close()


@dataclass
class Run:
    """Everything one Execute call streamed."""

    chunks: list[tuple[str, bytes]] = field(default_factory=list)
    result: Any = None

    @property
    def stdout(self) -> str:
        return b"".join(d for s, d in self.chunks if s == "stdout").decode(errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(d for s, d in self.chunks if s == "stderr").decode(errors="replace")

    @property
    def value(self) -> Any:
        assert self.result.ok, f"run failed: {self.result.error}"
        return json.loads(self.result.value_json)

    @property
    def kind(self) -> str:
        return KIND(self.result.error.kind)


class Client:
    def __init__(self, stub: sb_grpc.SandboxServiceStub) -> None:
        self.stub = stub

    def call(self, code: str, language: int = PY, args: dict | None = None, **limits: int):
        req = sb_pb.ExecuteRequest(
            language=language, code=code, arguments_json=json.dumps(args or {}), limits=sb_pb.Limits(**limits)
        )
        return self.stub.Execute(req, timeout=60)

    async def run(self, code: str, language: int = PY, args: dict | None = None, **limits: int) -> Run:
        out = Run()
        async for msg in self.call(code, language, args, **limits):
            if msg.HasField("result"):
                assert out.result is None, "two results"
                out.result = msg.result
            else:
                assert out.result is None, "output after the result"
                out.chunks.append((sb_pb.OutputStream.Name(msg.output.stream).split("_")[-1].lower(), msg.output.data))
        assert out.result is not None, "the stream ended without a result"
        return out

    async def assert_serving(self) -> None:
        """The service still answers a trivial run correctly."""
        run = await self.run("def main(n):\n    return n * 2", args={"n": 21})
        assert run.value == 42


def sandbox_uids(cfg: SandboxConfig) -> range:
    return range(cfg.uid_base, cfg.uid_base + cfg.workers)


def host_processes_with(marker: str | None = None, uids: range | None = None) -> list[int]:
    """Pids on the host whose command line contains `marker`, or whose uid is in `uids`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker is not None and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
            elif uids is not None and entry.stat().st_uid in uids:
                found.append(int(entry.name))
        except OSError:
            continue
    return found
