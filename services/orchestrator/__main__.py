"""python -m services.orchestrator: serve the canvas, agent, session, MCP and attachment services (port 50051)."""

from __future__ import annotations

from services.common import event_loop, serve
from services.orchestrator.app import build
from services.orchestrator.config import OrchestratorConfig


async def main() -> None:
    cfg = OrchestratorConfig.from_env()
    await serve(cfg.server, build(cfg))


if __name__ == "__main__":
    event_loop.run(main())
