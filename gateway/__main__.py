"""python -m gateway"""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.common import logs, tracing
from services.common.config import env_bool

log = logging.getLogger(__name__)


def main() -> None:
    cfg = GatewayConfig.from_env()
    logs.configure("gateway")
    tracing.configure("gateway")  # OTEL_* variables; off when none names an exporter
    log.info("gateway listening on http://%s:%s", cfg.host, cfg.port)
    # handler_cancellation: a client that disconnects cancels its handler, and with it the gRPC call.
    # TRELLIS_HTTP_REUSE_PORT=1 (set by `trellis up` when it starts several gateways): share the port with
    # SO_REUSEPORT, the kernel spreading connections over the processes.
    web.run_app(create_app(cfg), host=cfg.host, port=cfg.port, handler_cancellation=True, print=None, access_log=None,
                reuse_port=env_bool("TRELLIS_HTTP_REUSE_PORT", False) or None)


if __name__ == "__main__":
    main()
