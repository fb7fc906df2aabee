"""The orchestrator's gRPC services as its server binds them: each servicer with its generated registration
function and its full name (health and reflection report it), so `app.py` wires servicers without `_pb2`."""

from __future__ import annotations

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

from services.common.server import Binding
from services.orchestrator.api.agents import AgentServicer
from services.orchestrator.api.attachments import AttachmentServicer
from services.orchestrator.api.canvas import CanvasServicer
from services.orchestrator.api.completion_webhooks import WebhookServicer
from services.orchestrator.api.mcp_servers import McpServerServicer
from services.orchestrator.api.run_turns import RunTurnServicer
from services.orchestrator.api.schedules import ScheduleServicer
from services.orchestrator.api.sessions import SessionServicer


def _name(module: Any, service: str) -> str:
    return module.DESCRIPTOR.services_by_name[service].full_name


def service_bindings(*, canvas: CanvasServicer, run_turns: RunTurnServicer, agents: AgentServicer,
                     sessions: SessionServicer, mcp_servers: McpServerServicer, attachments: AttachmentServicer,
                     schedules: ScheduleServicer, webhooks: WebhookServicer) -> list[Binding]:
    return [
        Binding(canvas_grpc.add_CanvasServiceServicer_to_server, canvas, _name(canvas_pb, "CanvasService")),
        Binding(run_turn_grpc.add_RunTurnServiceServicer_to_server, run_turns, _name(run_turn_pb, "RunTurnService")),
        Binding(agent_grpc.add_AgentServiceServicer_to_server, agents, _name(agent_pb, "AgentService")),
        Binding(session_grpc.add_SessionServiceServicer_to_server, sessions, _name(session_pb, "SessionService")),
        Binding(mcp_grpc.add_McpServerServiceServicer_to_server, mcp_servers, _name(mcp_pb, "McpServerService")),
        Binding(att_grpc.add_AttachmentServiceServicer_to_server, attachments, _name(att_pb, "AttachmentService")),
        Binding(sched_grpc.add_ScheduleServiceServicer_to_server, schedules, _name(sched_pb, "ScheduleService")),
        Binding(hook_grpc.add_WebhookServiceServicer_to_server, webhooks, _name(hook_pb, "WebhookService")),
    ]
