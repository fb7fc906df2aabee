"""python -m services.retrieval: serve RetrievalService (default port 50053, TRELLIS_RETRIEVAL_PORT)."""

from __future__ import annotations

from services.common import event_loop, serve
from services.retrieval.app import build
from services.retrieval.config import RetrievalConfig


async def main() -> None:
    cfg = RetrievalConfig.from_env()
    await serve(cfg.server, build(cfg))


if __name__ == "__main__":
    event_loop.run(main())
