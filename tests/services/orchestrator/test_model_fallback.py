"""TRELLIS_MODEL_FALLBACK through the whole run: a canvas naming an unconfigured factory model runs on the
default chat model, and the LLM's node_finished event says so (inputs.model_fallback)."""

from __future__ import annotations

import json

import grpc
import pytest
from helpers import free_port
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


def _dsl(llm_id: str) -> str:
    def cpn(name, down, params=None, up=()):
        return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}

    return json.dumps({"components": {
        "begin": cpn("Begin", ["LLM:a"]),
        "LLM:a": cpn("LLM", ["Message:m"], {"llm_id": llm_id, "sys_prompt": "Be brief."}, ["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{LLM:a@content}"]}, ["LLM:a"]),
    }})


@pytest.fixture(params=[True, False], ids=["fallback", "no-fallback"])
async def stack(request, redis_server):
    cfg = LlmGatewayConfig.for_tests(default_chat_model="demo@Scripted", model_fallback=request.param)
    gateway = LlmGateway.create(cfg, scripts={"chat": {"demo": ["answered by the default"]}})
    llm_server, llm_port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    nowhere = f"127.0.0.1:{free_port()}"
    orch = build(OrchestratorConfig(
        server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0), engine=EngineSettings(),
        redis_url=redis_server.url, llm_gateway_addr=f"127.0.0.1:{llm_port}", retrieval_addr=nowhere,
        sandbox_addr=nowhere))
    for hook in orch.on_startup:
        await hook()
    server, port = await start_server(orch.bindings, service="orchestrator")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield channel, request.param
    await channel.close()
    await server.stop(None)
    for hook in orch.on_shutdown:
        await hook()
    await llm_server.stop(None)
    await gateway.aclose()


async def test_an_unconfigured_template_model_falls_back_or_fails_naming_what_to_set(stack):
    channel, fallback = stack
    events = [e async for e in canvas_grpc.CanvasServiceStub(channel).Run(
        canvas_pb.RunRequest(tenant_id="t1", dsl_json=_dsl("kimi-k2.5@Moonshot"), query="hi"), timeout=30)]
    finished = [e.node_finished for e in events if e.WhichOneof("kind") == "node_finished" and e.node_id == "LLM:a"]
    if fallback:
        assert not events[-1].run_finished.error
        answer = "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta")
        assert answer == "answered by the default"
        notice = json.loads(finished[0].inputs_json)["model_fallback"]
        assert "'kimi-k2.5@Moonshot' is not configured" in notice and "MOONSHOT_API_KEY" in notice
        assert "demo@Scripted" in notice
    else:
        error = events[-1].run_finished.error
        assert "kimi-k2.5@Moonshot" in error and "MOONSHOT_API_KEY" in error
        assert all("model_fallback" not in json.loads(f.inputs_json or "{}") for f in finished)
