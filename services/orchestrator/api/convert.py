"""Domain <-> protobuf conversion for the canvas API; business code never imports _pb2."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from trellis.canvas.v1 import agent_service_pb2 as agent_pb
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import events_pb2 as ev_pb
from trellis.canvas.v1 import session_service_pb2 as session_pb

from services.common.errors import InvalidArgument
from services.common.json_fields import dumps, json_object
from services.orchestrator.engine import events as ev
from services.orchestrator.api.convert_triggers import webhook_from_proto
from services.orchestrator.runs.spec import RunSpec
from services.orchestrator.runs.stream import Numbered
from services.orchestrator.store import AgentRecord, SessionRecord, VersionRecord


def _usage(usage: dict[str, Any]) -> ev_pb.Usage:
    return ev_pb.Usage(
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        total_tokens=int(usage.get("total_tokens", 0)),
        calls=int(usage.get("calls", 0)),
    )


def _kind(event: ev.Event) -> dict[str, Any]:
    match event:
        case ev.RunStarted():
            return {"run_started": ev_pb.RunStarted(inputs_json=dumps(event.inputs))}
        case ev.NodeStarted():
            return {"node_started": ev_pb.NodeStarted(
                component_name=event.component_name, component_type=event.component_type, thoughts=event.thoughts,
                restarted=event.restarted)}
        case ev.NodeFinished():
            return {"node_finished": ev_pb.NodeFinished(
                component_name=event.component_name, component_type=event.component_type,
                inputs_json=dumps(event.inputs), outputs_json=dumps(event.outputs), error=event.error or "",
                elapsed_s=event.elapsed_s, skipped=event.skipped)}
        case ev.MessageDelta():
            return {"message_delta": ev_pb.MessageDelta(
                content=event.content, start_to_think=event.start_to_think, end_to_think=event.end_to_think)}
        case ev.MessageEnd():
            return {"message_end": ev_pb.MessageEnd(
                reference_json=dumps(event.reference or {}),
                attachment_json=dumps(event.attachment) if event.attachment else "",
                downloads_json=dumps(event.downloads) if event.downloads else "", status=event.status)}
        case ev.ToolCallStarted():
            return {"tool_call_started": ev_pb.ToolCallStarted(
                call_id=event.call_id, tool_name=event.tool_name, arguments_json=dumps(event.arguments))}
        case ev.ToolCallFinished():
            return {"tool_call_finished": ev_pb.ToolCallFinished(
                call_id=event.call_id, tool_name=event.tool_name, result=event.result, error=event.error or "",
                elapsed_s=event.elapsed_s)}
        case ev.UserInputRequired():
            return {"user_input_required": ev_pb.UserInputRequired(inputs_json=dumps(event.inputs), tips=event.tips)}
        case ev.RunError():
            return {"error": ev_pb.RunError(message=event.message, component_id=event.component_id, code=event.code)}
        case ev.RunFinished():
            return {"run_finished": ev_pb.RunFinished(
                outputs_json=dumps(event.outputs), elapsed_s=event.elapsed_s, usage=_usage(event.usage),
                error=event.error or "", cancelled=event.cancelled, waiting_for_user=event.waiting_for_user)}
    raise TypeError(f"unknown event type {type(event).__name__}")


def numbered_to_proto(item: Numbered) -> ev_pb.RunEvent:
    """The event's message with its place in the run's stream, built once: the run's journal and its caller
    both send it (`item.encoded` keeps it; it must not be changed)."""
    pb = item.encoded
    if pb is None:
        event = item.event
        pb = item.encoded = ev_pb.RunEvent(
            run_id=event.run_id, session_id=event.session_id, node_id=event.node_id, timestamp=_ts(event.timestamp),
            path=list(event.path), seq=item.seq, **_kind(event))
    return pb


class ProtoEventCodec:
    """The run journal's format (runs/stream.py): each event stored as its `RunEvent` message, which WatchRun
    sends as it is."""

    @staticmethod
    def encode(item: Numbered) -> bytes:
        return numbered_to_proto(item).SerializeToString()

    @staticmethod
    def decode(data: bytes) -> ev.Event:
        return event_from_proto(ev_pb.RunEvent.FromString(data))


def issues_to_proto(issues: list[Any]) -> canvas_pb.ValidateResponse:
    return canvas_pb.ValidateResponse(
        valid=not issues,
        issues=[canvas_pb.ValidationIssue(component_id=i.component_id, field=i.field, message=i.message) for i in issues],
    )


def _ts(seconds: float) -> Timestamp:
    # What Timestamp.FromNanoseconds sets, built in one call (its Python code showed in profiles of a run).
    nanos = int(seconds * 1e9)
    return Timestamp(seconds=nanos // 1_000_000_000, nanos=nanos % 1_000_000_000)


def agent_to_proto(a: AgentRecord, *, include_dsl: bool = True) -> agent_pb.Agent:
    return agent_pb.Agent(
        id=a.id, tenant_id=a.tenant_id, title=a.title, description=a.description,
        dsl_json=a.dsl_json if include_dsl else "", canvas_type=a.canvas_type, canvas_category=a.canvas_category,
        created_at=_ts(a.created_at), updated_at=_ts(a.updated_at), latest_version_id=a.latest_version_id)


def version_to_proto(v: VersionRecord, *, include_dsl: bool = True) -> agent_pb.AgentVersion:
    return agent_pb.AgentVersion(id=v.id, agent_id=v.agent_id, number=v.number, title=v.title,
                                 dsl_json=v.dsl_json if include_dsl else "", created_at=_ts(v.created_at))


def session_to_proto(s: SessionRecord) -> session_pb.Session:
    return session_pb.Session(
        id=s.id, tenant_id=s.tenant_id, agent_id=s.agent_id, version_id=s.version_id, user_id=s.user_id,
        name=s.name, source=s.source, state_json=s.state_json, created_at=_ts(s.created_at),
        updated_at=_ts(s.updated_at),
        messages=[session_pb.ChatMessage(role=m.get("role", ""), content=m.get("content", ""), id=m.get("id", ""),
                                         created_at=_ts(float(m.get("created_at", 0))),
                                         reference_json=dumps(m.get("reference") or {}))
                  for m in s.messages])


def _file(f: Any) -> dict[str, Any]:
    """sys.files entry: the text of a text file, else a base64 data URI (what RAGFlow passes for images)."""
    entry: dict[str, Any] = {"name": f.name, "mime_type": f.mime_type, "url": f.url}
    if f.content:
        try:
            entry["content"] = f.content.decode("utf-8")
        except UnicodeDecodeError:
            entry["content"] = f"data:{f.mime_type or 'application/octet-stream'};base64,{base64.b64encode(f.content).decode()}"
    return entry


def run_spec_from_proto(request: canvas_pb.RunRequest) -> RunSpec:
    target = request.WhichOneof("target")
    if target is None:
        raise InvalidArgument("either dsl_json or agent is required")
    agent = request.agent if target == "agent" else None
    if agent is not None and not agent.agent_id:
        raise InvalidArgument("agent.agent_id is required")
    kwargs = json_object(request.chat_template_kwargs_json, "chat_template_kwargs_json")
    return RunSpec(
        tenant_id=request.tenant_id, run_id=request.run_id, dsl_json=request.dsl_json if target == "dsl_json" else "",
        agent_id=agent.agent_id if agent else "", version_id=agent.version_id if agent else "",
        draft=agent.draft if agent else False, session_id=request.session_id, query=request.query,
        inputs=json_object(request.inputs_json, "inputs_json"), files=[_file(f) for f in request.files],
        user_id=request.user_id, chat_template_kwargs=kwargs or None,
        history=[(m.role, m.content) for m in request.history if m.role in ("user", "assistant")],
        overrides=_overrides(request.overrides) if request.HasField("overrides") else {},
        continue_on_disconnect=request.continue_on_disconnect, create_session=request.create_session,
        answer_only=request.answer_only, custom_header=json_object(request.custom_header_json, "custom_header_json"),
        webhook_payload=json_object(request.webhook_payload_json, "webhook_payload_json") or None,
        multitask_strategy=request.multitask_strategy, interrupt_id=request.interrupt_id,
        api_key_id=request.api_key_id,
        completion_webhook=webhook_from_proto(request.completion_webhook, "request")
        if request.HasField("completion_webhook") else None)


def _overrides(o: canvas_pb.RunOverrides) -> dict[str, Any]:
    """Only what the request sets: an empty field means "keep the DSL's value"."""
    out: dict[str, Any] = {}
    if o.llm_id:
        out["llm_id"] = o.llm_id
    if o.system_prompt:
        out["system_prompt"] = o.system_prompt
    if o.enabled_tools:
        out["enabled_tools"] = list(o.enabled_tools)
    if o.attachments:
        out["attachments"] = [{"name": f.name, "content": _file(f).get("content", "")} for f in o.attachments]
    return out


def run_log_to_proto(run_id: str, info: dict[str, str], tool_calls: list[dict], thoughts: list[dict]) -> canvas_pb.GetRunLogResponse:
    return canvas_pb.GetRunLogResponse(
        run_id=run_id, session_id=info.get("session_id", ""), agent_id=info.get("agent_id", ""),
        status=info.get("status", ""), error=info.get("error", ""), started_at=float(info.get("started_at") or 0),
        finished_at=float(info.get("finished_at") or 0), tool_calls_json=dumps(tool_calls), thoughts_json=dumps(thoughts))


def run_info_to_proto(run_id: str, info: dict[str, str], path: list[str]) -> canvas_pb.RunInfo:
    return canvas_pb.RunInfo(
        run_id=run_id, session_id=info.get("session_id", ""), agent_id=info.get("agent_id", ""),
        status=info.get("status", ""), error=info.get("error", ""), started_at=float(info.get("started_at") or 0),
        finished_at=float(info.get("finished_at") or 0), parent_run_id=info.get("parent_run_id", ""),
        attempts=int(info.get("attempts") or 1), path=path, waiting_for=info.get("paused_node", ""),
        caller_run_id=info.get("caller_run_id", ""))


def event_from_proto(pb: ev_pb.RunEvent) -> ev.Event:
    """The domain event back from its protobuf (a resumed run rebuilds its turn from the stored stream)."""
    common = dict(run_id=pb.run_id, session_id=pb.session_id, node_id=pb.node_id,
                  timestamp=pb.timestamp.seconds + pb.timestamp.nanos / 1e9, path=tuple(pb.path))
    kind = pb.WhichOneof("kind")
    k = getattr(pb, kind)
    loads = lambda text, default: json.loads(text) if text else default  # noqa: E731
    match kind:
        case "run_started":
            event = ev.RunStarted.make(inputs=loads(k.inputs_json, {}), **common)
        case "node_started":
            event = ev.NodeStarted.make(component_name=k.component_name, component_type=k.component_type,
                            thoughts=k.thoughts, restarted=k.restarted, **common)
        case "node_finished":
            event = ev.NodeFinished.make(component_name=k.component_name, component_type=k.component_type,
                            inputs=loads(k.inputs_json, {}), outputs=loads(k.outputs_json, {}), error=k.error or None,
                            elapsed_s=k.elapsed_s, skipped=k.skipped, **common)
        case "message_delta":
            event = ev.MessageDelta.make(content=k.content, start_to_think=k.start_to_think,
                            end_to_think=k.end_to_think, **common)
        case "message_end":
            event = ev.MessageEnd.make(reference=loads(k.reference_json, {}),
                            attachment=loads(k.attachment_json, None), downloads=loads(k.downloads_json, []),
                            status=k.status, **common)
        case "tool_call_started":
            event = ev.ToolCallStarted.make(call_id=k.call_id, tool_name=k.tool_name,
                            arguments=loads(k.arguments_json, {}), **common)
        case "tool_call_finished":
            event = ev.ToolCallFinished.make(call_id=k.call_id, tool_name=k.tool_name, result=k.result,
                            error=k.error or None, elapsed_s=k.elapsed_s, **common)
        case "user_input_required":
            event = ev.UserInputRequired.make(inputs=loads(k.inputs_json, {}), tips=k.tips, **common)
        case "error":
            event = ev.RunError.make(message=k.message, component_id=k.component_id, code=k.code, **common)
        case _:
            event = ev.RunFinished.make(outputs=loads(k.outputs_json, {}), elapsed_s=k.elapsed_s,
                            usage={f: getattr(k.usage, f) for f in ("prompt_tokens", "completion_tokens",
                                                                     "total_tokens", "calls")},
                            error=k.error or None, cancelled=k.cancelled, waiting_for_user=k.waiting_for_user,
                            **common)
    return event
