"""A full orchestrator (real gRPC, real Redis) talking to a real llm_gateway (scripted provider): run
overrides travel from the RunRequest to the model, and an Agent's tool calls land in the run's log."""

from __future__ import annotations

import json

import grpc
import pytest
from helpers import free_port
from thinking_kit import EchoTool, registered
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.common.config import ServerConfig
from services.common.testing import start_server
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.server import LlmServicer
from services.orchestrator.app import build
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.engine_settings import EngineSettings
from services.orchestrator.store import RunStore

SCRIPTS = {"chat": {
    "m": [{"tool_calls": [{"name": "echo_0", "arguments": {"query": "weather"}}]}, "from m"],
    "n": ["from n"],
}}
ECHO = {"component_name": "TestEchoTool", "name": "Echo", "params": {}}


def _dsl() -> str:
    def cpn(name, down, params=None, up=()):
        return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}

    return json.dumps({"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", ["Message:m"], {"llm_id": "m@Scripted", "sys_prompt": "Original.", "tools": [ECHO]}, ["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}, ["Agent:a"]),
    }})


@pytest.fixture
async def stack(redis_server):
    gateway = LlmGateway.create(LlmGatewayConfig.for_tests(), scripts=SCRIPTS)
    llm_server, llm_port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    nowhere = f"127.0.0.1:{free_port()}"
    orch = build(OrchestratorConfig(
        server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0), engine=EngineSettings(),
        redis_url=redis_server.url, llm_gateway_addr=f"127.0.0.1:{llm_port}", retrieval_addr=nowhere, sandbox_addr=nowhere))
    for hook in orch.on_startup:
        await hook()
    server, port = await start_server(orch.bindings, service="orchestrator")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    with registered(EchoTool):
        yield channel, gateway.scripted()
    await channel.close()
    await server.stop(None)
    for hook in orch.on_shutdown:
        await hook()
    await llm_server.stop(None)
    await gateway.aclose()


async def _answer(channel, **kwargs) -> tuple[str, list]:
    events = [e async for e in canvas_grpc.CanvasServiceStub(channel).Run(
        canvas_pb.RunRequest(tenant_id="t1", dsl_json=_dsl(), query="weather?", **kwargs), timeout=30)]
    assert not events[-1].run_finished.error, events[-1].run_finished.error
    return "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta"), events


async def test_agent_tool_calls_are_logged_per_run(stack, redis_server):
    import redis.asyncio as aioredis

    channel, _ = stack
    answer, events = await _answer(channel)
    assert answer == "from m"
    client = aioredis.from_url(redis_server.url)
    try:
        [entry] = await RunStore(client).read_log("t1", events[0].run_id, "tool_calls")
    finally:
        await client.aclose()
    assert entry["tool_name"] == "echo_0" and entry["arguments"] == {"query": "weather"}
    assert entry["result"] == "echo: weather" and entry["component_id"] == "Agent:a" and not entry["error"]


async def test_run_overrides_reach_the_model_and_leave_the_dsl_alone(stack):
    channel, scripted = stack
    answer, _ = await _answer(channel, overrides=canvas_pb.RunOverrides(
        llm_id="n@Scripted", system_prompt="Overridden.",
        attachments=[canvas_pb.InputFile(name="notes.txt", content=b"The launch is on Friday.")]))
    assert answer == "from n"
    name, call = scripted.calls[-1]
    assert name == "n"
    texts = [m.content for m in call.messages]
    assert texts[0] == "Overridden." and any("The launch is on Friday." in t for t in texts)
    answer, _ = await _answer(channel, overrides=canvas_pb.RunOverrides(enabled_tools=["nothing_matches"]))
    name, call = scripted.calls[-1]
    assert name == "m" and not call.tools  # the model id and tools of the DSL, minus the disabled tool


async def test_run_log_rpc_returns_status_tool_calls_and_thoughts(stack):
    channel, _ = stack
    _, events = await _answer(channel)
    stub = canvas_grpc.CanvasServiceStub(channel)
    log = await stub.GetRunLog(canvas_pb.GetRunLogRequest(tenant_id="t1", run_id=events[0].run_id))
    assert log.status == "succeeded" and log.session_id == events[0].session_id and log.finished_at >= log.started_at > 0
    [call] = json.loads(log.tool_calls_json)
    assert call["tool_name"] == "echo_0" and call["result"] == "echo: weather"
    thoughts = json.loads(log.thoughts_json)
    assert thoughts and thoughts[0]["component_id"] == "Agent:a" and thoughts[0]["tool"] == "echo_0"
    for bad in (canvas_pb.GetRunLogRequest(tenant_id="t2", run_id=events[0].run_id),
                canvas_pb.GetRunLogRequest(tenant_id="t1", run_id=events[0].run_id, agent_id="someone-else")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetRunLog(bad)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
