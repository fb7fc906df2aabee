"""`serve()`: the one way every Trellis gRPC service starts, runs and stops (docs/adding-a-service.md)."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from services.common import allocator, heap, logs, metrics, open_files, tracing
from services.common.channels import SERVER_OPTIONS
from services.common.config import ServerConfig
from services.common.errors import ServiceError
from services.common.interceptors import server_interceptors

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class Binding:
    """A servicer and how to add it: `Binding(xx_grpc.add_XxServicer_to_server, servicer, "trellis.xx.v1.XxService")`."""

    add_fn: Callable[[Any, grpc.aio.Server], None]
    servicer: Any
    service_name: str


@dataclass
class Service:
    """What a service's `app.build(config)` returns and `serve()` runs: its servicers and its hooks.

    `build` opens nothing; `on_startup` hooks connect and check (health turns SERVING after them),
    `on_drain` hooks run as the server stops taking calls (long-lived streams end once their work is done, so
    the grace period waits for work, not for streams), `on_shutdown` hooks close, after the server has stopped.
    """

    bindings: list[Binding]
    on_startup: list[Hook] = field(default_factory=list)
    on_shutdown: list[Hook] = field(default_factory=list)
    on_drain: list[Hook] = field(default_factory=list)


async def build_server(service: str, bindings: Sequence[Binding]) -> tuple[grpc.aio.Server, health_aio.HealthServicer]:
    """A server with interceptors, the servicers, health (all NOT_SERVING) and reflection; not started."""
    server = grpc.aio.server(interceptors=server_interceptors(service), options=SERVER_OPTIONS)
    for b in bindings:
        b.add_fn(b.servicer, server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    await set_health(health, bindings, health_pb2.HealthCheckResponse.NOT_SERVING)
    names = [b.service_name for b in bindings]
    reflection.enable_server_reflection([*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], server)
    return server, health


async def set_health(health: health_aio.HealthServicer, bindings: Sequence[Binding], status: int) -> None:
    await health.set("", status)
    for b in bindings:
        await health.set(b.service_name, status)


async def serve(cfg: ServerConfig, service: Service) -> None:
    """Serve `service` (what `app.build(config)` returned) until SIGTERM/SIGINT, then shut down gracefully.

    Order: logs, server with interceptors, servicers + health + reflection, bind, startup hooks, SERVING,
    metrics exporter; on a signal: NOT_SERVING, drain, drain hooks, stop(grace), shutdown hooks.
    """
    allocator_in_use = allocator.keep_to_self()  # before any thread that reads the environment starts
    logs.configure(cfg.name)
    tracing.configure(cfg.name)
    log.info("%s: open files: %s", cfg.name, open_files.raise_soft_limit().describe())  # each stream is a socket
    allocator.log_in_use(log, cfg.name, allocator_in_use)
    bindings = service.bindings
    server, health = await build_server(cfg.name, bindings)
    address = f"{cfg.host}:{cfg.port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError as exc:
        raise SystemExit(f"{cfg.name}: cannot listen on {address} (port busy?): {exc}") from None
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        for hook in service.on_startup:
            try:
                await hook()
            except ServiceError as exc:
                # One line naming the service and the cause, for `trellis up` and for pod logs.
                log.error("%s: start-up failed: %s", cfg.name, exc.message)
                raise SystemExit(f"{cfg.name}: start-up failed: {exc.message}") from None
            except Exception as exc:
                log.exception("%s: start-up failed", cfg.name)
                raise SystemExit(f"{cfg.name}: start-up failed: {type(exc).__name__}: {exc}") from None
        try:
            metrics.start_exporter(cfg.metrics_port)
        except OSError as exc:
            raise SystemExit(f"{cfg.name}: cannot serve metrics on port {cfg.metrics_port}: {exc.strerror}") from None
        metrics.count_tasks(asyncio.get_running_loop())
        heap.set_collector(cfg.gc_policy)
        await set_health(health, bindings, health_pb2.HealthCheckResponse.SERVING)
        log.info("%s serving on %s (metrics on :%s)", cfg.name, address, cfg.metrics_port or "off")
        await stop.wait()
        log.info("%s shutting down: NOT_SERVING, drain %.1fs, grace %.1fs", cfg.name, cfg.drain_s, cfg.grace_s)
        await health.enter_graceful_shutdown()
        await asyncio.sleep(cfg.drain_s)
    finally:
        for hook in service.on_drain:
            await hook()
        await server.stop(cfg.grace_s)
        for hook in service.on_shutdown:
            try:
                await hook()
            except Exception:
                log.exception("%s: shutdown hook failed", cfg.name)
    log.info("%s stopped", cfg.name)
