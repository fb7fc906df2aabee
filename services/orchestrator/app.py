"""Builds the orchestrator from its config: Redis, stores, engine services, run manager and servicers."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

from trellis.canvas.internal.v1 import run_turn_service_pb2 as run_turn_pb
from trellis.canvas.internal.v1 import run_turn_service_pb2_grpc as run_turn_grpc
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import agent_service_pb2_grpc as agent_grpc
from trellis.canvas.v1 import attachment_service_pb2 as att_pb
from trellis.canvas.v1 import attachment_service_pb2_grpc as att_grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import mcp_service_pb2 as mcp_pb
from trellis.canvas.v1 import mcp_service_pb2_grpc as mcp_grpc
from trellis.canvas.v1 import schedule_service_pb2 as sched_pb
from trellis.canvas.v1 import schedule_service_pb2_grpc as sched_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb
from trellis.canvas.v1 import webhook_service_pb2_grpc as hook_grpc

from services.clients import LlmClient, RetrievalClient, SandboxClient
from services.common.server import Binding, Service
from services.common.speed_policies import journal_policy
from services.orchestrator.api.convert import ProtoEventCodec
from services.orchestrator.api.agents import AgentServicer
from services.orchestrator.api.attachments import AttachmentServicer
from services.orchestrator.api.canvas import CanvasServicer
from services.orchestrator.api.mcp_servers import McpServerServicer
from services.orchestrator.api.run_turns import RunTurnServicer
from services.orchestrator.api.schedules import ScheduleServicer
from services.orchestrator.api.sessions import SessionServicer
from services.orchestrator.api.completion_webhooks import WebhookServicer
from services.orchestrator.api import webhook_triggers
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from services.orchestrator.egress.mcp import McpAccess
from services.orchestrator.engine.settings import Services
from services.orchestrator.runs.children import ManagedChildRuns
from services.orchestrator.runs.manager import RunManager
from services.orchestrator.store import AgentStore, RunStore, SessionStore, layout, redis_client
from services.orchestrator.store.attachments import AttachmentStore
from services.orchestrator.store.mcp_servers import McpServerStore
from services.orchestrator.store.redis_client import wait_until_ready
from services.orchestrator.store.runs import CancelListener
from services.orchestrator.triggers import Triggers


def _name(module: Any, service: str) -> str:
    return module.DESCRIPTOR.services_by_name[service].full_name


def build(cfg: OrchestratorConfig) -> Service:
    redis = redis_client.connect(cfg.redis_url)  # lazy: nothing connects until start-up
    # The replica id in the run leases this process holds.
    owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    agents, sessions = AgentStore(redis), SessionStore(redis, cfg.session_ttl_s)
    runs = RunStore(redis, owner=owner, lease_s=cfg.run_lease_s)
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
    manager = RunManager(agents, sessions, runs, services, codec=ProtoEventCodec(), max_attempts=cfg.run_max_attempts,
                         journal=journal_policy(cfg.journal_policy))
    services.children = ManagedChildRuns(manager)  # AgentCall: the tenant's other agents as child runs
    listener = CancelListener(redis, manager.cancel_local, manager.recheck_cancels)
    triggers = Triggers(redis, manager, http, cfg.triggers)  # schedules and completion webhooks

    async def start() -> None:
        await wait_until_ready(redis, cfg.redis_url)
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
    bindings = [
        Binding(canvas_grpc.add_CanvasServiceServicer_to_server, CanvasServicer(manager), _name(canvas_pb, "CanvasService")),
        Binding(run_turn_grpc.add_RunTurnServiceServicer_to_server, run_turns, _name(run_turn_pb, "RunTurnService")),
        Binding(agent_grpc.add_AgentServiceServicer_to_server, AgentServicer(agents, sessions), _name(agent_pb, "AgentService")),
        Binding(session_grpc.add_SessionServiceServicer_to_server, SessionServicer(agents, sessions), _name(session_pb, "SessionService")),
        Binding(mcp_grpc.add_McpServerServiceServicer_to_server, McpServerServicer(mcp_servers, mcp_access), _name(mcp_pb, "McpServerService")),
        Binding(att_grpc.add_AttachmentServiceServicer_to_server, AttachmentServicer(attachments), _name(att_pb, "AttachmentService")),
        Binding(sched_grpc.add_ScheduleServiceServicer_to_server, ScheduleServicer(agents, triggers.schedules, triggers.scheduler),
                _name(sched_pb, "ScheduleService")),
        Binding(hook_grpc.add_WebhookServiceServicer_to_server, WebhookServicer(agents, triggers.outbox, manager.queries),
                _name(hook_pb, "WebhookService")),
        webhook_triggers.binding(redis, cfg.redis_url),  # RAGFlow's webhook trigger: rate limit, test log
    ]
    return Service(bindings, on_startup=[start], on_drain=[run_turns.turns.drain], on_shutdown=[stop])
