"""python -m services.llm_gateway: serve LlmService (default port 50052, TRELLIS_LLM_GATEWAY_PORT)."""

from __future__ import annotations

import asyncio
import os

from services.common import serve
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.providers.local import LocalProvider
from services.llm_gateway.server import LlmServicer


async def main() -> None:
    # Models load from installed packages only; make sure nothing in the stack reaches for a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = LlmGatewayConfig.from_env()
    gateway = LlmGateway.create(cfg)
    # The local chat model's runtime against this CPU: one line at start, not SIGILL at the first token.
    checks = [p.check for p in gateway.registry.providers if isinstance(p, LocalProvider)]
    await serve(cfg.server, [LlmServicer(gateway).binding()], on_startup=checks, on_shutdown=[gateway.aclose])


if __name__ == "__main__":
    asyncio.run(main())
