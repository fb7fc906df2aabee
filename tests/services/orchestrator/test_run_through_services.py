"""A full orchestrator (real gRPC, real Redis) talking to a real llm_gateway (scripted provider): run
overrides travel from the RunRequest to the model, and an Agent's tool calls land in the run's log."""

from __future__ import annotations

import json

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.store import RunStore
from tests.support.canvas import registered
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.tool_doubles import EchoTool

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
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_server.url, llm_gateway_addr=llm.addr) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            with registered(EchoTool):
                yield channel, llm.scripted


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
