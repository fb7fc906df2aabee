"""`python -m services.llm_gateway` as a real process, configured from the environment only."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.request

import grpc
from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from tests.support.net import free_port, health_status


async def _serving(channel: grpc.aio.Channel) -> None:
    for _ in range(600):
        try:
            if await health_status(channel, "trellis.llm.v1.LlmService") == "SERVING":
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError("llm_gateway never became SERVING")


async def test_process_serves_chat_from_env_config_and_exports_metrics(tmp_path):
    scripts = tmp_path / "scripts.yaml"
    scripts.write_text("chat:\n  demo:\n    - reply: hello from the script\n")
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "TRELLIS_LLM_GATEWAY_PORT": str(port),
        "TRELLIS_LLM_GATEWAY_METRICS_PORT": str(metrics_port),
        "TRELLIS_LLM_SCRIPTS": str(scripts),
        "TRELLIS_DEFAULT_CHAT_MODEL": "demo@Scripted",
        "TRELLIS_LLM_LOCAL": "0",
        "TRELLIS_DRAIN_S": "0",
    }
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.llm_gateway", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        await _serving(channel)
        stub = llm_grpc.LlmServiceStub(channel)
        chunks = [c async for c in stub.Chat(llm_pb.ChatRequest(
            messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_USER, content="hi")]), timeout=10)]
        assert "".join(c.content_delta for c in chunks) == "hello from the script"
        assert chunks[0].model == "demo@Scripted"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode())
        assert 'trellis_llm_tokens_total{direction="out",model="demo",provider="Scripted"}' in body
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert "llm_gateway stopped" in (await proc.stderr.read()).decode()
    finally:
        await channel.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
