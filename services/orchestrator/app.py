"""Builds the orchestrator from its config: Redis, stores, engine services, run manager and servicers."""

from __future__ import annotations

import os
import socket
import uuid

from services.clients import LlmClient, RetrievalClient, SandboxClient
from services.common.server import Service
from services.common.speed_policies import journal_policy
from services.orchestrator.api import webhook_triggers
from services.orchestrator.api.agents import AgentServicer
from services.orchestrator.api.attachments import AttachmentServicer
from services.orchestrator.api.bindings import service_bindings
from services.orchestrator.api.canvas import CanvasServicer
from services.orchestrator.api.completion_webhooks import WebhookServicer
from services.orchestrator.api.convert import ProtoEventCodec
from services.orchestrator.api.mcp_servers import McpServerServicer
from services.orchestrator.api.run_turns import RunTurnServicer
from services.orchestrator.api.schedules import ScheduleServicer
from services.orchestrator.api.sessions import SessionServicer
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from services.orchestrator.egress.mcp import McpAccess
from services.orchestrator.engine.settings import Services
from services.orchestrator.limits import LimitsFileError, LimitsSource, TenantGate
from services.orchestrator.limits.gate import FIGURES_TTL_S
from services.orchestrator.runs.children import ManagedChildRuns
from services.orchestrator.runs.manager import RunManager
from services.orchestrator.store import AgentStore, RunStore, SessionStore, layout, redis_client
from services.orchestrator.store.admission import AdmissionFigureStore
from services.orchestrator.store.attachments import AttachmentStore
from services.orchestrator.store.limits import LimitStore
from services.orchestrator.store.mcp_servers import McpServerStore
from services.orchestrator.store.redis_client import wait_until_ready
from services.orchestrator.store.cancels import CancelListener
from services.orchestrator.triggers import Triggers


def build(cfg: OrchestratorConfig) -> Service:
    target = cfg.redis  # one Redis, a cluster or Sentinel's primary, plain or TLS
    redis = redis_client.connect(target)  # lazy: nothing connects until start-up
    # The replica id in the run leases this process holds.
    owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    agents, sessions = AgentStore(redis), SessionStore(redis, cfg.session_ttl_s)
    runs = RunStore(redis, owner=owner, lease_s=cfg.run_lease_s, ttl_s=cfg.run_ttl_s)
    http = OutboundHttp(EgressPolicy.from_entries(cfg.engine.ssrf_allowlist))
    mcp_servers = McpServerStore(redis)
    attachments = AttachmentStore(redis, ttl_s=cfg.attachment_ttl_s, max_bytes=cfg.attachment_max_bytes)
    mcp_access = McpAccess(http, cfg.engine.mcp_timeout_s, cfg.engine.mcp_allow_stdio)
    # Clients connect lazily: a peer that is down fails the component that calls it, not start-up.
    peers = (LlmClient.connect(cfg.llm_gateway_addr), RetrievalClient.connect(cfg.retrieval_addr),
             SandboxClient.connect(cfg.sandbox_addr))
    services = Services(
        settings=cfg.engine, http=http, llm=peers[0], retrieval=peers[1], sandbox=peers[2],
        mcp_servers=mcp_servers, attachments=attachments)
    try:
        limits_source = LimitsSource(cfg.limits_file)
    except LimitsFileError as exc:  # a typo must not run a tenant unlimited: name it and stop
        raise SystemExit(f"configuration error: {exc}") from None
    # Limits per tenant: this replica leases slots for as long as it leases its runs (a dead one's expire alike).
    limits = TenantGate(limits_source, LimitStore(redis, target, owner=owner, lease_ttl_s=cfg.run_lease_s),
                        AdmissionFigureStore(redis, owner=owner, ttl_s=FIGURES_TTL_S))
    manager = RunManager(agents, sessions, runs, services, codec=ProtoEventCodec(), limits=limits,
                         max_attempts=cfg.run_max_attempts, journal=journal_policy(cfg.journal_policy))
    services.children = ManagedChildRuns(manager)  # AgentCall: the tenant's other agents as child runs
    listener = CancelListener(redis, manager.cancel_local, manager.recheck_cancels)
    triggers = Triggers(redis, manager, http, cfg.triggers)  # schedules and completion webhooks

    async def start() -> None:
        await wait_until_ready(redis, target.shown)
        await layout.upgrade(redis)  # records stored before the keys had hash tags
        await listener.start()
        await agents.resolved_cache.start()
        await manager.start()
        await triggers.start()

    async def stop() -> None:
        await triggers.stop()
        await manager.aclose()
        await listener.stop()
        await agents.resolved_cache.aclose()
        await http.aclose()
        for peer in peers:
            await peer.close()
        await redis.aclose()

    run_turns = RunTurnServicer(manager)  # the gateway's runs (internal)
    bindings = service_bindings(
        canvas=CanvasServicer(manager), run_turns=run_turns, agents=AgentServicer(agents, sessions),
        sessions=SessionServicer(agents, sessions), mcp_servers=McpServerServicer(mcp_servers, mcp_access),
        attachments=AttachmentServicer(attachments),
        schedules=ScheduleServicer(agents, triggers.schedules, triggers.scheduler),
        webhooks=WebhookServicer(agents, triggers.outbox, manager.queries))
    bindings.append(webhook_triggers.binding(redis, target))  # RAGFlow's webhook trigger: rate limit, test log
    return Service(bindings, on_startup=[start], on_drain=[run_turns.turns.drain], on_shutdown=[stop])
