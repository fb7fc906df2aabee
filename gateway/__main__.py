"""python -m gateway"""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common import allocator, event_loop, heap, logs, open_files, tracing
from services.common.config import env_policy
from services.common.speed_policies import gc_policy

log = logging.getLogger(__name__)


def main() -> None:
    allocator_in_use = allocator.keep_to_self()  # before any thread that reads the environment starts
    cfg = GatewayConfig.from_env()
    gc = env_policy(gc_policy)  # TRELLIS_GC_POLICY, as every service's ServerConfig reads it
    logs.configure("gateway")
    tracing.configure("gateway")  # OTEL_* variables; off when none names an exporter
    log.info("gateway listening on http://%s:%s", cfg.host, cfg.port)
    log.info("gateway: open files: %s", open_files.raise_soft_limit().describe())  # a socket per held stream
    allocator.log_in_use(log, "gateway", allocator_in_use)
    app = create_app(cfg)

    async def set_collector(_app: web.Application) -> None:
        heap.set_collector(gc)

    app.on_startup.append(set_collector)
    # handler_cancellation: a client that disconnects cancels its handler, and with it the gRPC call.
    web.run_app(app, host=cfg.host, port=cfg.port, handler_cancellation=True, print=None, access_log=None,
                reuse_port=cfg.reuse_port or None, loop=event_loop.new_loop())


if __name__ == "__main__":
    main()
