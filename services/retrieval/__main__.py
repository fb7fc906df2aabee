"""python -m services.retrieval"""

from __future__ import annotations

import asyncio

from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from services import common
from services.retrieval.config import RetrievalConfig
from services.retrieval.server import RetrievalServicer


async def main() -> None:
    cfg = RetrievalConfig.from_env()
    service = rr_pb.DESCRIPTOR.services_by_name["RetrievalService"].full_name
    await common.serve(cfg.server, [common.Binding(rr_grpc.add_RetrievalServiceServicer_to_server, RetrievalServicer(), service)])


if __name__ == "__main__":
    asyncio.run(main())
