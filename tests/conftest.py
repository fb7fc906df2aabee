from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers.py, tests/fakes/
sys.path.insert(0, str(Path(__file__).resolve().parent / "services" / "orchestrator"))  # thinking_kit

from helpers import free_port  # noqa: E402


class RedisServer:
    """A real redis-server (the same binary `trellis up` uses) with AOF, restartable to test durability."""

    def __init__(self, workdir: Path) -> None:
        from trellis_cli.stack import redis_binary

        self.binary = redis_binary()
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def redis_client(redis_server):
    client = aioredis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def orchestrator_addr(redis_server):
    """A real orchestrator (all three servicers) on port 0 in this process, backed by the test Redis.
    Its peers point at a closed port: components that call them fail like a peer that is down."""
    from services.common.config import ServerConfig
    from services.common.testing import start_server
    from services.orchestrator.app import build
    from services.orchestrator.config import OrchestratorConfig
    from services.orchestrator.engine_settings import EngineSettings

    nowhere = f"127.0.0.1:{free_port()}"
    cfg = OrchestratorConfig(
        server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0), engine=EngineSettings(),
        redis_url=redis_server.url, llm_gateway_addr=nowhere, retrieval_addr=nowhere, sandbox_addr=nowhere)
    orch = build(cfg)
    for hook in orch.on_startup:
        await hook()
    server, port = await start_server(orch.bindings, service="orchestrator")
    yield f"127.0.0.1:{port}"
    await server.stop(None)
    for hook in orch.on_shutdown:
        await hook()
