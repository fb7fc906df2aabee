"""python -m services.retrieval: serve RetrievalService (default port 50053, TRELLIS_RETRIEVAL_PORT)."""

from __future__ import annotations

import asyncio

from services.common import serve
from services.retrieval.config import RetrievalConfig
from services.retrieval.server import RetrievalServicer


async def main() -> None:
    cfg = RetrievalConfig.from_env()
    servicer = RetrievalServicer.from_config(cfg)
    await serve(cfg.server, [servicer.binding()], on_startup=[servicer.start], on_shutdown=[servicer.aclose])


if __name__ == "__main__":
    asyncio.run(main())
