#!/usr/bin/env python3
"""LLM gateway: what the gateway hop costs, against floors measured in the same run.

  openai_stream   a 400-token streamed answer from a local OpenAI-compatible server (tests/support/fake_openai.py), read
                  with the openai SDK directly (floor) and through the gateway's gRPC Chat (gateway)
  local_chat      SmolLM2-135M generating 48 tokens: llama-cpp-python called directly (floor) and through
                  the gateway (thread hand-off, queue, gRPC)
  local_embed     32 sentences through all-MiniLM-L6-v2: the numpy encoder directly (floor) and through Embed
Each reports medians and `ratio` = gateway / floor (1.0 = free; the numbers are noisy on shared machines).

Usage: python bench/llm_bench.py [--quick]   -> bench/results/llm.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import grpc  # noqa: E402
import openai  # noqa: E402
from trellis.llm.v1 import chat_pb2 as chat_pb  # noqa: E402
from trellis.llm.v1 import llm_service_pb2 as llm_pb  # noqa: E402
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc  # noqa: E402

from services.common.testing import start_server  # noqa: E402
from services.llm_gateway.config import LlmGatewayConfig  # noqa: E402
from services.llm_gateway.gateway import LlmGateway  # noqa: E402
from services.llm_gateway.providers import local  # noqa: E402
from services.llm_gateway.server import LlmServicer  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks  # noqa: E402

TOKENS = 400


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def _pair(floor: list[float], gateway: list[float]) -> dict[str, float]:
    f, g = _median(floor), _median(gateway)
    return {"floor_ms": f, "gateway_ms": g, "ratio": round(g / f, 3) if f else 0.0, "n": len(floor)}


async def _gateway(cfg: LlmGatewayConfig):
    gw = LlmGateway.create(cfg)
    server, port = await start_server([LlmServicer(gw).binding()], service="llm_gateway")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return gw, server, channel, llm_grpc.LlmServiceStub(channel)


async def bench_openai_stream(runs: int) -> dict[str, object]:
    fake = FakeOpenAI()
    base = await fake.start()
    words = " ".join(f"w{i}" for i in range(TOKENS))
    client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
    gw, server, channel, stub = await _gateway(LlmGatewayConfig.for_tests(openai_base_url=base, openai_api_key="x"))
    floor, via, ttft_floor, ttft_via = [], [], [], []
    req = llm_pb.ChatRequest(model_id="m", messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_USER, content="go")])
    try:
        for _ in range(runs):
            fake.chat(Reply.stream(text_chunks(words)))
            t = time.perf_counter()
            first = None
            stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
            async for c in stream:
                if first is None and c.choices and c.choices[0].delta.content:
                    first = time.perf_counter()
            floor.append((time.perf_counter() - t) * 1000)
            ttft_floor.append(((first or t) - t) * 1000)
            fake.chat(Reply.stream(text_chunks(words)))
            t = time.perf_counter()
            first = None
            async for c in stub.Chat(req, timeout=60):
                if first is None and c.content_delta:
                    first = time.perf_counter()
            via.append((time.perf_counter() - t) * 1000)
            ttft_via.append(((first or t) - t) * 1000)
    finally:
        await channel.close()
        await server.stop(None)
        await gw.aclose()
        await client.close()
        await fake.stop()
    out = _pair(floor, via)
    out["tokens"] = TOKENS
    out["ttft"] = _pair(ttft_floor, ttft_via)
    return out


async def bench_local(runs: int) -> dict[str, object]:
    from services.llm_gateway.providers._minilm import MiniLMEncoder
    from services.llm_gateway.providers.llama_cpu import import_llama

    Llama = import_llama()  # loads the CPU backend that runs here

    llm = Llama(model_path=str(local.chat_model_path()), n_ctx=2048, n_threads=2, verbose=False)
    encoder = MiniLMEncoder(local.embedding_model_dir())
    gw, server, channel, stub = await _gateway(LlmGatewayConfig.for_tests(local_enabled=True, local_context=2048))
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    sentences = [f"Sentence number {i} talks about rivers, mountains and the sea." for i in range(32)]
    chat_floor, chat_via, emb_floor, emb_via = [], [], [], []
    req = llm_pb.ChatRequest(messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_USER, content="Tell me about the sea.")],
                             max_tokens=48, sampling=chat_pb.SamplingParams(temperature=0.0))
    try:
        await stub.Embed(llm_pb.EmbedRequest(texts=["warm up"]), timeout=60)  # load both models before timing
        [c async for c in stub.Chat(req, timeout=60)]
        for _ in range(runs):
            t = time.perf_counter()
            for _c in await asyncio.to_thread(
                lambda: list(llm.create_chat_completion(messages=messages, max_tokens=48, temperature=0.0, stream=True))
            ):
                pass
            chat_floor.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            [c async for c in stub.Chat(req, timeout=60)]
            chat_via.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await asyncio.to_thread(encoder.encode, sentences)
            emb_floor.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await stub.Embed(llm_pb.EmbedRequest(texts=sentences), timeout=60)
            emb_via.append((time.perf_counter() - t) * 1000)
    finally:
        await channel.close()
        await server.stop(None)
        await gw.aclose()
    return {"local_chat": {**_pair(chat_floor, chat_via), "max_tokens": 48},
            "local_embed": {**_pair(emb_floor, emb_via), "texts": len(sentences)}}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 3 if args.quick else 7
    results: dict[str, object] = {"openai_stream": await bench_openai_stream(runs * 2)}
    results.update(await bench_local(runs))
    summary = {k: v["ratio"] for k, v in results.items() if isinstance(v, dict)}  # type: ignore[index]
    out = {
        "bench": "llm",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "summary": {"gateway_over_floor": summary},
        "results": results,
    }
    path = ROOT / "bench" / "results" / "llm.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"]))


if __name__ == "__main__":
    asyncio.run(main())
