"""Helpers for the tests of the components that think (LLM, Agent, Categorize, CodeExec).

Models are the REAL llm_gateway service (scripted provider, or the local one) on port 0, reached
through `LlmClient`; code runs in the REAL sandbox service on port 0.
"""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator

import grpc
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

from services.common.testing import start_server
from services.llm_gateway.client import LlmClient
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.providers.scripted import ScriptedProvider
from services.llm_gateway.server import LlmServicer
from services.orchestrator.components import base as cbase
from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.dsl import load_canvas
from services.orchestrator.engine_settings import EngineSettings, Services
from services.orchestrator.events import RunFinished
from services.orchestrator.runner import run
from services.orchestrator.state import RunRequest, SessionState
from services.orchestrator.validate import compile_plan
from services.sandbox.config import SandboxConfig
from services.sandbox.limits import Limits
from services.sandbox.app import create_executor
from services.sandbox.server import SandboxServicer

SANDBOX_LIMITS = Limits(wall_time_ms=8_000, cpu_time_ms=4_000, memory_bytes=256 << 20, max_processes=8,
                        max_output_bytes=256 << 10, max_file_bytes=4 << 20)


class Llm:
    """A running gateway and a client for it."""

    def __init__(self, gateway: LlmGateway, client: LlmClient) -> None:
        self.gateway = gateway
        self.client = client

    @property
    def calls(self) -> list[tuple[str, Any]]:
        """(model name, ChatCall) of every request the scripted provider answered."""
        provider = self.gateway.scripted()
        assert isinstance(provider, ScriptedProvider)
        return provider.calls

    def calls_to(self, name: str) -> list[Any]:
        return [c for n, c in self.calls if n == name]


@asynccontextmanager
async def llm_gateway(scripts: dict[str, Any] | None = None, **cfg: Any) -> AsyncIterator[Llm]:
    gateway = LlmGateway.create(LlmGatewayConfig.for_tests(**cfg), scripts=scripts)
    server, port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    client = LlmClient.connect(f"127.0.0.1:{port}")
    try:
        yield Llm(gateway, client)
    finally:
        await client.close()
        await server.stop(None)
        await gateway.aclose()


@asynccontextmanager
async def sandbox_service() -> AsyncIterator[sb_grpc.SandboxServiceStub]:
    cfg = SandboxConfig.for_tests(defaults=SANDBOX_LIMITS)
    servicer = SandboxServicer(cfg, await create_executor(cfg))
    server, port = await start_server([servicer.binding()], service="sandbox")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield sb_grpc.SandboxServiceStub(channel)
    finally:
        await server.stop(None)


def services(llm: Llm | None = None, sandbox: Any = None, *, settings: EngineSettings | None = None,
             **extra: Any) -> Services:
    return Services(settings=settings or EngineSettings(), llm=llm.client if llm else None, sandbox=sandbox,
                    extra=dict(extra))


def node_ctx(svc: Services, params: dict[str, Any] | None = None, *, query: str = "", component_id: str = "Test:node",
             component_name: str = "Test", overrides: dict[str, Any] | None = None,
             state: SessionState | None = None, **kw: Any) -> NodeContext:
    ctx = NodeContext.for_test(params, services=svc, component_id=component_id, component_name=component_name,
                               globals_={"sys.query": query, **kw.pop("globals_", {})},
                               request=RunRequest(run_id="run-test", query=query, overrides=overrides or {}), **kw)
    ctx.env.state = state if state is not None else SessionState.fresh()
    return ctx


def cpn(name: str, down: list[str] | tuple[str, ...] = (), params: dict[str, Any] | None = None,
        up: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": list(down), "upstream": list(up)}


async def run_canvas(dsl: Any, svc: Services, *, query: str = "", inputs: dict[str, Any] | None = None,
                     overrides: dict[str, Any] | None = None, state: SessionState | None = None) -> list[Any]:
    plan = compile_plan(load_canvas(dsl))
    req = RunRequest(run_id="run-1", session_id="s-1", query=query, inputs=inputs or {}, overrides=overrides or {})
    events = [ev async for ev in run(plan, req, state, svc)]
    assert isinstance(events[-1], RunFinished)
    return events


def of(events: list[Any], cls: type, node: str | None = None) -> list[Any]:
    return [e for e in events if isinstance(e, cls) and (node is None or e.node_id == node)]


@contextmanager
def registered(*classes: type[Component]) -> Iterator[None]:
    """Register test components for the duration of a test, restoring whatever had those names."""
    saved = {c.component_name: cbase._REGISTRY.get(c.component_name) for c in classes}
    for c in classes:
        cbase._REGISTRY[c.component_name] = c
    try:
        yield
    finally:
        for name, prev in saved.items():
            if prev is None:
                cbase._REGISTRY.pop(name, None)
            else:
                cbase._REGISTRY[name] = prev


# ------------------------------------------------------------------------------------ tool doubles
SPANS: list[tuple[str, float, float]] = []  # (label, start, end) of SlowTool calls


class SlowTool(Component):
    """Sleeps `seconds` (param) and answers "slept <label>"; records its time span in SPANS."""

    component_name = "TestSlowTool"

    async def run(self, ctx: NodeContext) -> None:
        label = str(self.params.get("query", ""))
        t0 = time.monotonic()
        await asyncio.sleep(float(self.params.get("seconds", 0.3)))
        SPANS.append((label, t0, time.monotonic()))
        ctx.set_output("result", f"slept {label}")


class FailTool(Component):
    component_name = "TestFailTool"

    async def run(self, ctx: NodeContext) -> None:
        raise RuntimeError(str(self.params.get("message", "disk on fire")))


class EchoTool(Component):
    """Echoes its `query` argument, as `formalized_content` (like RAGFlow's search tools)."""

    component_name = "TestEchoTool"

    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {"name": "echo", "description": "Echoes the query.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("formalized_content", f"echo: {self.params.get('query', '')}")


class WeatherTool(Component):
    """get_weather(city): a fixed forecast (the local-model test's one tool)."""

    component_name = "TestWeatherTool"

    @classmethod
    def tool_meta(cls, params: dict) -> dict:
        return {"name": "get_weather", "description": "Get the current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("result", f"Sunny, 21 degrees in {self.params.get('city', '?')}")
