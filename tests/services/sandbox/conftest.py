"""Fixtures: a real sandbox server on port 0 (real bwrap, real runtimes) and a client for it."""

from __future__ import annotations

from typing import AsyncIterator

import pytest

from services.sandbox.config import SandboxConfig
from services.sandbox.server import SandboxServicer
from tests.support.sandbox import TEST_DEFAULTS, Client, sandbox_server, sandbox_servicer


@pytest.fixture
def sandbox_cfg() -> SandboxConfig:
    return SandboxConfig.for_tests(defaults=TEST_DEFAULTS)


@pytest.fixture
async def servicer(sandbox_cfg: SandboxConfig) -> SandboxServicer:
    return await sandbox_servicer(sandbox_cfg)


@pytest.fixture
async def client(servicer: SandboxServicer) -> AsyncIterator[Client]:
    async with sandbox_server(servicer) as sandbox:
        yield Client(sandbox.stub)
