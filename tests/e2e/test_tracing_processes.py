"""Traces across real processes: the gateway, the orchestrator and the llm_gateway each started as
`python -m ...` with only the standard OTEL_* variables, exporting over OTLP/HTTP to a local receiver. A
client's `traceparent` starts the trace; every process's spans land in it with the right parents."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import grpc

from tests.support.fake_otlp import OtlpReceiver
from tests.support.net import free_port, health_status
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
KEY = "otel-key"
TRACE_ID = "5b8efff798038103d269b633813fc60c"
CLIENT_SPAN = "eee19b7ec3c1b174"
DSL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["LLM:Say"], "upstream": []},
    "LLM:Say": {"obj": {"component_name": "LLM", "params": {
        "llm_id": "poet@Scripted", "sys_prompt": "Be brief.", "prompts": [{"role": "user", "content": "{sys.query}"}]}},
        "downstream": ["Message:Out"], "upstream": ["begin"]},
    "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["{LLM:Say@content}"]}},
                    "downstream": [], "upstream": ["LLM:Say"]},
}}


def _start(module: str, env: dict[str, str], log: Path, stack: ExitStack) -> subprocess.Popen:
    out = stack.enter_context(log.open("wb"))
    proc = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    stack.callback(lambda: (proc.terminate(), proc.wait(20)))
    return proc


async def _until(check, proc: subprocess.Popen, log: Path, what: str) -> None:
    async def up():
        assert proc.poll() is None, f"{what} exited at start:\n{log.read_text()[-3000:]}"
        return await check()

    try:
        await eventually(up, what=what, timeout=90, ignoring=(OSError, aiohttp.ClientError, grpc.aio.AioRpcError))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log.read_text()[-3000:]}") from None


async def test_one_trace_across_gateway_orchestrator_and_llm_gateway_processes(redis_server, tmp_path):
    scripts = tmp_path / "scripts.json"
    scripts.write_text(json.dumps({"chat": {"poet": ["Roses are red."]}}))
    llm_port, orch_port, http_port = free_port(), free_port(), free_port()
    with OtlpReceiver() as receiver, ExitStack() as stack:
        base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        base.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
                     "TRELLIS_HOST": "127.0.0.1", "TRELLIS_DRAIN_S": "0", "TRELLIS_DATA_DIR": str(tmp_path),
                     "TRELLIS_LLM_GATEWAY_ADDR": f"127.0.0.1:{llm_port}",
                     "TRELLIS_ORCHESTRATOR_ADDR": f"127.0.0.1:{orch_port}",
                     "TRELLIS_RETRIEVAL_ADDR": f"127.0.0.1:{free_port()}", "TRELLIS_SANDBOX_ADDR": f"127.0.0.1:{free_port()}"})
        llm_log, orch_log, http_log = tmp_path / "llm.log", tmp_path / "orchestrator.log", tmp_path / "gateway.log"
        llm = _start("services.llm_gateway", {**base, "TRELLIS_LLM_GATEWAY_PORT": str(llm_port),
                                              "TRELLIS_LLM_GATEWAY_METRICS_PORT": "0", "TRELLIS_LLM_LOCAL": "0",
                                              "TRELLIS_LLM_SCRIPTS": str(scripts)}, llm_log, stack)
        orch = _start("services.orchestrator", {**base, "TRELLIS_ORCHESTRATOR_PORT": str(orch_port),
                                                "TRELLIS_ORCHESTRATOR_METRICS_PORT": "0",
                                                "TRELLIS_REDIS_URL": redis_server.url}, orch_log, stack)
        gateway = _start("gateway", {**base, "TRELLIS_HTTP_HOST": "127.0.0.1", "TRELLIS_HTTP_PORT": str(http_port),
                                     "TRELLIS_API_KEYS": f"{KEY}:otel-{os.getpid()}"}, http_log, stack)
        url = f"http://127.0.0.1:{http_port}"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{llm_port}") as llm_channel, \
                grpc.aio.insecure_channel(f"127.0.0.1:{orch_port}") as orch_channel, aiohttp.ClientSession() as http:
            await _until(lambda: _serving(llm_channel), llm, llm_log, "llm_gateway")
            await _until(lambda: _serving(orch_channel), orch, orch_log, "orchestrator")

            async def gateway_up() -> bool:
                async with http.get(f"{url}/api/v1/agents", headers=headers) as resp:
                    return resp.status == 200

            await _until(gateway_up, gateway, http_log, "gateway")
            async with http.post(f"{url}/api/v1/agents", headers=headers, json={"title": "otel", "dsl": DSL}) as resp:
                agent_id = (await resp.json())["data"]["id"]
            async with http.post(f"{url}/api/v1/agents/{agent_id}/stream", json={"query": "a poem"},
                                 headers={**headers, "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}) as resp:
                raw = (await resp.read()).decode()
        assert "Roses are red." in "".join(json.loads(line[6:])["data"].get("delta", "") for line in raw.splitlines()
                                           if line.startswith("data: "))

        def complete(spans) -> bool:
            # Every span asserted below: each process exports in its own batches, so a server span that ends
            # after the run's own span (the turn is stored in between) may come in a later batch.
            names = {(service, s.name) for service, s in spans if s.trace_id.hex() == TRACE_ID}
            return {("trellis-gateway", "POST /api/v1/agents/{agent_id}/stream"), ("trellis-orchestrator", "run"),
                    ("trellis-orchestrator", "trellis.canvas.v1.CanvasService/Run"),
                    ("trellis-llm_gateway", "trellis.llm.v1.LlmService/Chat"),
                    ("trellis-llm_gateway", "chat poet")} <= names

        spans = await asyncio.to_thread(receiver.wait_for, complete)

    traced = [(service, s) for service, s in spans if s.trace_id.hex() == TRACE_ID]
    by_id = {s.span_id: (service, s) for service, s in traced}

    def one(service: str, name: str):
        found = [s for svc, s in traced if svc == service and s.name == name]
        assert len(found) == 1, (service, name, sorted((svc, s.name) for svc, s in traced))
        return found[0]

    def parent(span):
        return by_id[span.parent_span_id][1]

    http_span = one("trellis-gateway", "POST /api/v1/agents/{agent_id}/stream")
    assert http_span.parent_span_id.hex() == CLIENT_SPAN
    run_rpc = one("trellis-orchestrator", "trellis.canvas.v1.CanvasService/Run")
    assert parent(run_rpc) is http_span
    run = one("trellis-orchestrator", "run")
    assert run_rpc in (parent(run), parent(parent(run)))
    llm_component = [s for svc, s in traced if s.name == "component LLM"][0]
    assert parent(llm_component) is run
    chat_rpc = one("trellis-llm_gateway", "trellis.llm.v1.LlmService/Chat")
    assert parent(chat_rpc) is llm_component
    gen_ai = one("trellis-llm_gateway", "chat poet")
    assert parent(gen_ai) is chat_rpc
    attributes = {a.key: a.value for a in gen_ai.attributes}
    assert attributes["gen_ai.request.model"].string_value == "poet"
    assert attributes["gen_ai.usage.output_tokens"].int_value > 0
    assert list(attributes["gen_ai.response.finish_reasons"].array_value.values)[0].string_value == "stop"


async def _serving(channel: grpc.aio.Channel) -> bool:
    return await health_status(channel) == "SERVING"
