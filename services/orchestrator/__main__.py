"""python -m services.orchestrator"""

from __future__ import annotations

import asyncio

from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc

from services import common
from services.orchestrator import redis_client
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.server import AgentServicer, CanvasServicer, SessionServicer


def _name(module, service: str) -> str:
    return module.DESCRIPTOR.services_by_name[service].full_name


async def main() -> None:
    cfg = OrchestratorConfig.from_env()
    redis = None

    async def open_redis() -> None:
        nonlocal redis
        redis = await redis_client.connect(cfg.redis_url)

    async def close_redis() -> None:
        if redis is not None:
            await redis.aclose()

    bindings = [
        common.Binding(canvas_grpc.add_CanvasServiceServicer_to_server, CanvasServicer(), _name(canvas_pb, "CanvasService")),
        common.Binding(agent_grpc.add_AgentServiceServicer_to_server, AgentServicer(), _name(agent_pb, "AgentService")),
        common.Binding(session_grpc.add_SessionServiceServicer_to_server, SessionServicer(), _name(session_pb, "SessionService")),
    ]
    await common.serve(cfg.server, bindings, on_startup=[open_redis], on_shutdown=[close_redis])


if __name__ == "__main__":
    asyncio.run(main())
