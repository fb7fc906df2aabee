"""python -m services.sandbox"""

from __future__ import annotations

import asyncio

from services import common
from services.sandbox.config import SandboxConfig
from services.sandbox.server import SandboxServicer


async def main() -> None:
    cfg = SandboxConfig.from_env()
    servicer = SandboxServicer(cfg)  # start() checks isolation and refuses to serve without it
    await common.serve(cfg.server, [servicer.binding()], on_startup=[servicer.start])


if __name__ == "__main__":
    asyncio.run(main())
