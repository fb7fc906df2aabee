"""The whole pipeline in one process, each part on its own port: HTTP gateway -> orchestrator replicas (one Redis)
-> llm_gateway -> a model. Each replica records the Run and Cancel calls it served.

    async with pipeline(redis_url, replicas=2, openai_base_url=url, openai_api_key="k") as p:
        await p.client.post(...)            # HTTP, over round_robin to every replica
        p.runs[0], p.runs[1]                # session ids of the runs each replica served
        p.canvas[1]                         # a CanvasService stub that reaches replica 1 only
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp.test_utils import TestClient, TestServer
from helpers import free_port
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common.config import ServerConfig
from services.common.testing import start_server
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.server import LlmServicer
from services.orchestrator.app import build
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.engine_settings import EngineSettings
from services.orchestrator.server import CanvasServicer

KEY = "pipeline-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}


@dataclass
class Pipeline:
    client: TestClient
    canvas: list[canvas_grpc.CanvasServiceStub]
    runs: list[list[str]] = field(default_factory=list)  # per replica: session id of each Run served
    cancels: list[int] = field(default_factory=list)  # per replica: Cancel calls served


def _recording(servicer: CanvasServicer, runs: list[str], cancels: list[int], index: int) -> None:
    run, cancel = servicer.Run, servicer.Cancel

    async def recorded_run(request, context):
        runs.append(request.session_id)
        async for event in run(request, context):
            yield event

    async def recorded_cancel(request, context):
        cancels[index] += 1
        return await cancel(request, context)

    servicer.Run, servicer.Cancel = recorded_run, recorded_cancel  # read when the servicer is added to a server


@asynccontextmanager
async def pipeline(redis_url: str, *, replicas: int = 1, **llm_cfg: Any):
    gateway = LlmGateway.create(LlmGatewayConfig.for_tests(**llm_cfg))
    llm_server, llm_port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    nowhere = f"127.0.0.1:{free_port()}"
    runs: list[list[str]] = [[] for _ in range(replicas)]
    cancels = [0] * replicas
    started: list[tuple[Any, grpc.aio.Server, int]] = []
    for i in range(replicas):
        orch = build(OrchestratorConfig(
            server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0), engine=EngineSettings(),
            redis_url=redis_url, llm_gateway_addr=f"127.0.0.1:{llm_port}", retrieval_addr=nowhere, sandbox_addr=nowhere))
        _recording(next(b.servicer for b in orch.bindings if isinstance(b.servicer, CanvasServicer)), runs[i], cancels, i)
        for hook in orch.on_startup:
            await hook()
        server, port = await start_server(orch.bindings, service="orchestrator")
        started.append((orch, server, port))
    ports = [port for _, _, port in started]
    orchestrator = f"127.0.0.1:{ports[0]}" if replicas == 1 else "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
    upstreams = {"orchestrator": orchestrator, "llm_gateway": f"127.0.0.1:{llm_port}", "retrieval": nowhere,
                 "sandbox": nowhere}
    cfg = GatewayConfig(host="127.0.0.1", port=0, upstreams=upstreams, health_timeout_s=1.0,
                        api_keys={KEY: f"pipeline-{time.monotonic_ns()}"})
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{p}") for p in ports]
    try:
        yield Pipeline(client, [canvas_grpc.CanvasServiceStub(ch) for ch in channels], runs, cancels)
    finally:
        for ch in channels:
            await ch.close()
        await client.close()
        for orch, server, _ in started:
            await server.stop(None)
            for hook in orch.on_shutdown:
                await hook()
        await llm_server.stop(None)
        await gateway.aclose()


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
