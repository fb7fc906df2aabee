"""The whole pipeline in one process, each part on its own port: HTTP gateway -> orchestrator replicas (one Redis)
-> llm_gateway -> a model. Each replica records the runs and Cancel calls it served. `engine`: the replicas'
EngineSettings; other keywords configure the llm_gateway.

    async with pipeline(redis_url, replicas=2, openai_base_url=url, openai_api_key="k") as p:
        await p.client.post(...)            # HTTP, over round_robin to every replica
        p.runs[0], p.runs[1]                # session ids of the runs each replica served
        p.canvas[1]                         # a CanvasService stub that reaches replica 1 only
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp.test_utils import TestClient, TestServer
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common.server import Service
from services.orchestrator.api.canvas import CanvasServicer
from services.orchestrator.api.run_turns import RunTurnServicer
from services.orchestrator.engine.settings import EngineSettings
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator

KEY = "pipeline-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}


@dataclass
class Pipeline:
    client: TestClient
    canvas: list[canvas_grpc.CanvasServiceStub]
    runs: list[list[str]] = field(default_factory=list)  # per replica: session id of each Run served
    cancels: list[int] = field(default_factory=list)  # per replica: Cancel calls served
    servicers: list[CanvasServicer] = field(default_factory=list)  # per replica: its CanvasService
    run_turns: list[RunTurnServicer] = field(default_factory=list)  # per replica: its RunTurnService (the gateway's runs)


def _recording(runs: list[str], cancels: list[int], index: int, servicers: list[CanvasServicer],
               run_turns: list[RunTurnServicer]):
    """Wraps a replica's CanvasServicer so it records the runs it serves (Run calls and the gateway's turns, which
    share its run manager) and the Cancel calls."""

    def prepare(service: Service) -> None:
        servicer = next(b.servicer for b in service.bindings if isinstance(b.servicer, CanvasServicer))
        servicers.append(servicer)
        run_turns.append(next(b.servicer for b in service.bindings if isinstance(b.servicer, RunTurnServicer)))
        execute, cancel = servicer.runs.execute, servicer.Cancel

        def recorded_execute(spec):
            runs.append(spec.session_id)
            return execute(spec)

        async def recorded_cancel(request, context):
            cancels[index] += 1
            return await cancel(request, context)

        servicer.runs.execute = recorded_execute
        servicer.Cancel = recorded_cancel  # read when the servicer is added to a server

    return prepare


@asynccontextmanager
async def pipeline(redis_url: str, *, replicas: int = 1, engine: EngineSettings | None = None, **llm_cfg: Any):
    runs: list[list[str]] = [[] for _ in range(replicas)]
    cancels = [0] * replicas
    servicers: list[CanvasServicer] = []
    run_turns: list[RunTurnServicer] = []
    async with AsyncExitStack() as stack:
        llm = await stack.enter_async_context(llm_gateway(**llm_cfg))
        ports = []
        for i in range(replicas):
            orch = await stack.enter_async_context(orchestrator(
                redis_url, llm_gateway_addr=llm.addr, engine=engine, prepare=_recording(runs[i], cancels, i, servicers, run_turns)))
            ports.append(orch.port)
        nowhere = f"127.0.0.1:{free_port()}"
        addr = f"127.0.0.1:{ports[0]}" if replicas == 1 else "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
        upstreams = {"orchestrator": addr, "llm_gateway": llm.addr, "retrieval": nowhere, "sandbox": nowhere}
        cfg = GatewayConfig(host="127.0.0.1", port=0, upstreams=upstreams, health_timeout_s=1.0,
                            api_keys={KEY: f"pipeline-{time.monotonic_ns()}"})
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        stack.push_async_callback(client.close)
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{p}") for p in ports]
        for ch in channels:
            stack.push_async_callback(ch.close)
        yield Pipeline(client, [canvas_grpc.CanvasServiceStub(ch) for ch in channels], runs, cancels, servicers,
                       run_turns)


def agent_canvas(llm_id: str = "gpt-test") -> dict:
    """Begin -> Agent (one model call, no tools) -> Message that shows the Agent's answer."""
    def cpn(name, down, params, up):
        return {"obj": {"component_name": name, "params": params}, "downstream": down, "upstream": up}

    return {"components": {
        "begin": cpn("Begin", ["Agent:a"], {}, []),
        "Agent:a": cpn("Agent", ["Message:m"], {"llm_id": llm_id, "sys_prompt": "Talk.", "max_rounds": 1}, ["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}, ["Agent:a"]),
    }}


def echo_canvas() -> dict:
    """Begin -> Message: answers without a model."""
    return {"components": {
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Message:m"], "upstream": []},
        "Message:m": {"obj": {"component_name": "Message", "params": {"content": ["You said: {sys.query}"]}},
                      "downstream": [], "upstream": ["begin"]}}}


async def create_agent(client: TestClient, dsl: dict) -> str:
    body = await (await client.post("/api/v1/agents", headers=HEADERS,
                                     json={"title": f"a{time.monotonic_ns()}", "dsl": dsl})).json()
    assert body["code"] == 0, body
    return body["data"]["id"]
