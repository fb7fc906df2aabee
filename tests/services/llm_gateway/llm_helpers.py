"""Helpers for the LLM gateway tests (fixtures are in conftest.py)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc
from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from services.common.testing import start_server
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.server import LlmServicer


@dataclass
class Running:
    gateway: LlmGateway
    stub: llm_grpc.LlmServiceStub
    channel: grpc.aio.Channel
    port: int

    async def chat(self, req: llm_pb.ChatRequest, timeout: float = 10) -> list[llm_pb.ChatResponse]:
        return [c async for c in self.stub.Chat(req, timeout=timeout)]


@asynccontextmanager
async def running_gateway(cfg: LlmGatewayConfig, scripts: Any = None) -> AsyncIterator[Running]:
    """The real servicer behind the production interceptors, on 127.0.0.1:0, with a real channel."""
    gateway = LlmGateway.create(cfg, scripts=scripts)
    server, port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Running(gateway, llm_grpc.LlmServiceStub(channel), channel, port)
    finally:
        await channel.close()
        await server.stop(None)
        await gateway.aclose()


def user(text: str) -> chat_pb.ChatMessage:
    return chat_pb.ChatMessage(role=chat_pb.ROLE_USER, content=text)


def text_of(chunks: list[llm_pb.ChatResponse]) -> str:
    return "".join(c.content_delta for c in chunks)


def tool_calls_of(chunks: list[llm_pb.ChatResponse]) -> list[tuple[str, str, str]]:
    """(id, name, arguments) per call index, joined from the streamed deltas."""
    calls: dict[int, list[str]] = {}
    for c in chunks:
        for d in c.tool_call_deltas:
            call = calls.setdefault(d.index, ["", "", ""])
            call[0] = call[0] or d.id
            call[1] = call[1] or d.name
            call[2] += d.arguments_delta
    return [tuple(calls[i]) for i in sorted(calls)]  # type: ignore[misc]
