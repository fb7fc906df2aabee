"""python -m services.sandbox: serve SandboxService (default port 50054, TRELLIS_SANDBOX_PORT)."""

from __future__ import annotations

from services.common import event_loop, serve
from services.sandbox.app import build
from services.sandbox.config import SandboxConfig


async def main() -> None:
    cfg = SandboxConfig.from_env()
    await serve(cfg.server, build(cfg))  # start-up checks isolation and refuses to serve without it


if __name__ == "__main__":
    event_loop.run(main())
