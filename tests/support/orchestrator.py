"""A real orchestrator (all its servicers) in this process on 127.0.0.1:0, backed by a real Redis. The one way
the tests start an orchestrator:

    async with orchestrator(redis_server.url, llm_gateway_addr=llm.addr) as orch:
        orch.addr                      # "127.0.0.1:<port>", for the HTTP gateway's upstreams or a channel

A peer that is not given points at a closed port: components that call it fail like a peer that is down.
Other keywords are OrchestratorConfig fields (run_lease_s=...); `engine=` its EngineSettings. `prepare`
sees the built service before it starts (to wrap a servicer, say).
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from services.common.config import ServerConfig
from services.common.server import Service
from services.common.testing import start_service, stop_service
from services.orchestrator.app import build
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.engine.settings import EngineSettings
from tests.support.net import free_port


@dataclass
class RunningOrchestrator:
    service: Service
    port: int

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def orchestrator_config(redis_url: str, *, llm_gateway_addr: str = "", retrieval_addr: str = "",
                        sandbox_addr: str = "", engine: EngineSettings | None = None,
                        **fields: Any) -> OrchestratorConfig:
    nowhere = f"127.0.0.1:{free_port()}"
    return OrchestratorConfig(server=ServerConfig("orchestrator", "127.0.0.1", 0, 0, 1.0, 0.0),
                              engine=engine or EngineSettings(), redis_url=redis_url,
                              llm_gateway_addr=llm_gateway_addr or nowhere, retrieval_addr=retrieval_addr or nowhere,
                              sandbox_addr=sandbox_addr or nowhere, **fields)


@asynccontextmanager
async def orchestrator(redis_url: str, *, prepare: Callable[[Service], None] | None = None,
                       **cfg: Any) -> AsyncIterator[RunningOrchestrator]:
    service = build(orchestrator_config(redis_url, **cfg))
    if prepare is not None:
        prepare(service)
    server, port = await start_service(service, "orchestrator")
    try:
        yield RunningOrchestrator(service, port)
    finally:
        await stop_service(server, service)
