"""Fixtures every test can use: one per service, each a real server on 127.0.0.1:0 in this process (the
helpers they wrap are in tests/support/, see tests/README.md), the test Redis, and the spans a test records.

Imports of the services stay inside the fixtures: collecting a test module never loads a service it does
not use.
"""
from __future__ import annotations

import pytest

from tests.support.redis_server import RedisServer


def pytest_asyncio_loop_factories(config, item):
    """Tests run on the loop the services run on (uvloop unless TRELLIS_UVLOOP=0)."""
    from services.common import event_loop

    return {"uvloop" if event_loop.uses_uvloop() else "asyncio": event_loop.new_loop}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def redis_client(redis_server):
    from services.orchestrator.store.redis_client import connect

    client = connect(redis_server.url)  # the orchestrator's own client
    yield client
    await client.aclose()


@pytest.fixture
async def llm(request):
    """A real llm_gateway (tests/support/llm_gateway.py). Its scripts, when a test needs some:
    `@pytest.mark.parametrize("llm", [{"chat": {"m": ["Hello."]}}], indirect=True)`."""
    from tests.support.llm_gateway import llm_gateway

    async with llm_gateway(getattr(request, "param", None)) as running:
        yield running


@pytest.fixture
async def sandbox():
    """A real sandbox service (tests/support/sandbox.py): a SandboxClient, for `services(llm, sandbox)`."""
    from tests.support.sandbox import sandbox_service

    async with sandbox_service() as client:
        yield client


@pytest.fixture
async def retrieval(tmp_path):
    """A real retrieval service over SQLite with scripted embeddings (tests/support/retrieval.py): a Stack
    whose shortcuts create datasets, ingest and search as a fresh tenant."""
    from tests.support.retrieval import embedding_gateway, running_stack

    async with embedding_gateway() as llm_addr, running_stack("sqlite", tmp_path, llm_addr) as stack:
        yield stack


@pytest.fixture
async def orchestrator_addr(redis_server):
    """A real orchestrator (all three servicers) on port 0 in this process, backed by the test Redis.
    Its peers point at a closed port: components that call them fail like a peer that is down."""
    from tests.support.orchestrator import orchestrator

    async with orchestrator(redis_server.url) as orch:
        yield orch.addr


@pytest.fixture
def spans():
    """Every span finished during the test, in memory (an InMemorySpanExporter: `spans.get_finished_spans()`)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from services.common import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()
