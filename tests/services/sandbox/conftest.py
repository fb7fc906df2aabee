"""Fixtures: a real sandbox server on port 0 (real bwrap, real runtimes) and a client for it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import AsyncIterator

import grpc
import pytest
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sandbox_client.py (importlib import mode)

from sandbox_client import TEST_DEFAULTS, Client  # noqa: E402

from services.common.testing import start_server  # noqa: E402
from services.sandbox.config import SandboxConfig  # noqa: E402
from services.sandbox.app import create_executor  # noqa: E402
from services.sandbox.server import SandboxServicer  # noqa: E402


@pytest.fixture
def sandbox_cfg() -> SandboxConfig:
    return SandboxConfig.for_tests(defaults=TEST_DEFAULTS)


@pytest.fixture
async def servicer(sandbox_cfg: SandboxConfig) -> SandboxServicer:
    return SandboxServicer(sandbox_cfg, await create_executor(sandbox_cfg))


@pytest.fixture
async def client(servicer: SandboxServicer) -> AsyncIterator[Client]:
    server, port = await start_server([servicer.binding()], service="sandbox")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Client(sb_grpc.SandboxServiceStub(channel))
    finally:
        await server.stop(None)
