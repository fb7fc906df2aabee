"""A real llm_gateway in this process on 127.0.0.1:0, behind the production interceptors, and the chat helpers
its tests share. The one way the tests start an llm_gateway:

    async with llm_gateway({"chat": {"m": ["Hello."]}}) as llm:     # scripts for the scripted provider
        llm.addr                # "127.0.0.1:<port>", for a peer's config
        llm.client              # the orchestrator's LlmClient, connected
        await llm.chat(req)     # the raw gRPC stream, as a list
        llm.served("Complete")  # Complete calls answered so far (any gateway of this process)
        llm.calls_to("m")       # what the scripted provider was asked
        await llm.stop(); await llm.start()    # down, then serving again on the same port

Config overrides are `LlmGatewayConfig.for_tests` keywords; `config=` passes a whole config instead.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc
from prometheus_client import REGISTRY
from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from trellis.llm.v1 import llm_service_pb2_grpc as llm_grpc

from services.common.testing import start_server
from services.clients import LlmClient
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.providers.scripted import ScriptedProvider
from services.llm_gateway.chat_turns import ChatTurnServicer
from services.llm_gateway.server import LlmServicer


@dataclass
class RunningLlmGateway:
    """A running gateway: the object, its gRPC server and port, a channel to it with a raw stub, and the
    orchestrator's client."""

    gateway: LlmGateway
    server: grpc.aio.Server
    port: int
    channel: grpc.aio.Channel
    stub: llm_grpc.LlmServiceStub
    client: LlmClient

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def scripted(self) -> ScriptedProvider:
        provider = self.gateway.scripted()
        assert isinstance(provider, ScriptedProvider), "this gateway has no scripted provider"
        return provider

    @property
    def calls(self) -> list[tuple[str, Any]]:
        """(model name, ChatCall) of every request the scripted provider answered."""
        return self.scripted.calls

    def calls_to(self, name: str) -> list[Any]:
        return [c for n, c in self.calls if n == name]

    @staticmethod
    def served(method: str) -> int:
        """How many `method` calls ("Chat", "Complete"...) the llm_gateways of this process have answered OK
        (the production metric; read it before and after what a test does)."""
        return int(REGISTRY.get_sample_value("trellis_grpc_requests_total", {
            "service": "llm_gateway", "method": f"/trellis.llm.v1.LlmService/{method}", "code": "OK"}) or 0)

    async def chat(self, req: llm_pb.ChatRequest, timeout: float = 10) -> list[llm_pb.ChatResponse]:
        return [c async for c in self.stub.Chat(req, timeout=timeout)]

    async def stop(self) -> None:
        await self.server.stop(None)

    async def start(self) -> None:
        """Serve the same gateway again on the same port (after `stop()`): clients keep their address."""
        self.server, _ = await start_server(bindings(self.gateway), service="llm_gateway", port=self.port)


def bindings(gateway: LlmGateway) -> list:
    """What the llm_gateway serves (services/llm_gateway/app.py): LlmService, and its turns (ChatTurnService)."""
    servicer = LlmServicer(gateway)
    return [servicer.binding(), ChatTurnServicer(servicer).binding()]


@asynccontextmanager
async def llm_gateway(scripts: Any = None, *, config: LlmGatewayConfig | None = None,
                      **overrides: Any) -> AsyncIterator[RunningLlmGateway]:
    gateway = LlmGateway.create(config or LlmGatewayConfig.for_tests(**overrides), scripts=scripts)
    server, port = await start_server(bindings(gateway), service="llm_gateway")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    client = LlmClient.connect(f"127.0.0.1:{port}")
    running = RunningLlmGateway(gateway, server, port, channel, llm_grpc.LlmServiceStub(channel), client)
    try:
        yield running
    finally:
        await client.close()
        await channel.close()
        await running.server.stop(None)
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
