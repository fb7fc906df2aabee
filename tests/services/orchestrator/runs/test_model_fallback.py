"""TRELLIS_MODEL_FALLBACK through the whole run: a canvas naming an unconfigured factory model runs on the
default chat model, and the LLM's node_finished event says so (inputs.model_fallback)."""

from __future__ import annotations

import json

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator


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
    async with (llm_gateway({"chat": {"demo": ["answered by the default"]}}, default_chat_model="demo@Scripted",
                            model_fallback=request.param) as llm,
                orchestrator(redis_server.url, llm_gateway_addr=llm.addr) as orch):
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            yield channel, request.param


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
