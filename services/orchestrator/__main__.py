"""python -m services.orchestrator"""

from __future__ import annotations

import asyncio

from services import common
from services.orchestrator.app import build
from services.orchestrator.config import OrchestratorConfig


async def main() -> None:
    cfg = OrchestratorConfig.from_env()
    orchestrator = build(cfg)
    await common.serve(cfg.server, orchestrator.bindings, on_startup=orchestrator.on_startup, on_shutdown=orchestrator.on_shutdown)


if __name__ == "__main__":
    asyncio.run(main())
