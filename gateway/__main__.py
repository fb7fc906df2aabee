"""python -m gateway"""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common import event_loop, heap, logs, tracing

log = logging.getLogger(__name__)


def main() -> None:
    cfg = GatewayConfig.from_env()
    logs.configure("gateway")
    tracing.configure("gateway")  # OTEL_* variables; off when none names an exporter
    log.info("gateway listening on http://%s:%s", cfg.host, cfg.port)
    app = create_app(cfg)

    async def freeze_startup_heap(_app: web.Application) -> None:
        heap.freeze_startup_heap()

    app.on_startup.append(freeze_startup_heap)
    # handler_cancellation: a client that disconnects cancels its handler, and with it the gRPC call.
    web.run_app(app, host=cfg.host, port=cfg.port, handler_cancellation=True, print=None, access_log=None,
                reuse_port=cfg.reuse_port or None, loop=event_loop.new_loop())


if __name__ == "__main__":
    main()
