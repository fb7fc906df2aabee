"""python -m services.llm_gateway: serve LlmService (default port 50052, TRELLIS_LLM_GATEWAY_PORT)."""

from __future__ import annotations

import os

from services.common import event_loop, serve
from services.llm_gateway.app import build
from services.llm_gateway.config import LlmGatewayConfig


async def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models load from installed packages only, never from a hub
    cfg = LlmGatewayConfig.from_env()
    await serve(cfg.server, build(cfg))


if __name__ == "__main__":
    event_loop.run(main())
