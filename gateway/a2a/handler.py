"""The A2A 1.0 methods over the orchestrator: the a2a-sdk's `RequestHandler`, served by its JSON-RPC dispatcher
(gateway/a2a/routes.py), which also takes the 0.3 method names.

- `contextId` is the session; a message without one starts a new session.
- `taskId` is the run: the id of the run a message started. A UserFillUp pause is `INPUT_REQUIRED`; the message
  that answers it (same taskId; a data part holds the fields, or a text part when the form has one field)
  resumes the session in a new run whose parent is the paused one, and the task follows the chain to its
  newest run: the task id does not change.
- The answer streams as one artifact (`answer`), appended chunk by chunk; its references are the artifact's
  metadata. `SubscribeToTask` replays the run's stream from its start (WatchRun) and follows it live.
- A run the orchestrator refuses to admit (the tenant over a limit) is a JSON-RPC error with its retry delay
  (gateway/a2a/refusals.py).
- Runs started here continue when the client disconnects (A2A tasks outlive connections); `CancelTask` stops
  them.

The tenant and the agent come from the gateway's authentication and the path (`ServerCallContext.state`),
never from the request: another tenant's tasks are not found.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, AsyncGenerator

import grpc
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import (InvalidParamsError, TaskNotCancelableError, TaskNotFoundError,
                              UnsupportedOperationError)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import events_pb2
from trellis.canvas.v1 import session_service_pb2 as session_pb

from gateway.a2a.push import PushConfigs
from gateway.a2a.refusals import refused
from gateway.agent_calls import RunOutcome, call_request
from gateway.errors import GatewayError, from_rpc_error
from gateway.orchestrator import Orchestrator

log = logging.getLogger(__name__)

_STATES = {"running": a2a.TASK_STATE_WORKING, "waiting_for_user": a2a.TASK_STATE_INPUT_REQUIRED,
           "succeeded": a2a.TASK_STATE_COMPLETED, "failed": a2a.TASK_STATE_FAILED,
           "cancelled": a2a.TASK_STATE_CANCELED}
_TERMINAL = {a2a.TASK_STATE_COMPLETED, a2a.TASK_STATE_FAILED, a2a.TASK_STATE_CANCELED}
ANSWER = "answer"


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    return ParseDict(value, struct_pb2.Struct())


def _agent_message(text: str, task_id: str, context_id: str, data: dict[str, Any] | None = None) -> a2a.Message:
    parts = [a2a.Part(text=text)] if text else []
    if data is not None:
        parts.append(a2a.Part(data=ParseDict(data, struct_pb2.Value())))
    return a2a.Message(message_id=uuid.uuid4().hex, role=a2a.ROLE_AGENT, parts=parts, task_id=task_id,
                       context_id=context_id)


class Caller:
    def __init__(self, context: ServerCallContext) -> None:
        state = context.state
        self.orch: Orchestrator = state["orchestrator"]
        self.tenant: str = state["tenant"]
        self.agent_id: str = state["agent_id"]
        self.api_key_id: str = state.get("api_key_id", "")  # the caller's key's, whose own limits apply too
        self.state = state


class RunView:
    """One run's events as A2A events of task `task_id`, and what they came to."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.outcome = RunOutcome()
        self._chunks = 0

    @property
    def context_id(self) -> str:
        return self.outcome.session_id

    def state(self) -> int:
        o = self.outcome
        if o.finished is None:
            return a2a.TASK_STATE_WORKING
        return (a2a.TASK_STATE_INPUT_REQUIRED if o.waiting else a2a.TASK_STATE_CANCELED if o.cancelled
                else a2a.TASK_STATE_FAILED if o.error else a2a.TASK_STATE_COMPLETED)

    def status(self) -> a2a.TaskStatus:
        o, state = self.outcome, self.state()
        status = a2a.TaskStatus(state=state)
        status.timestamp.GetCurrentTime()
        if state == a2a.TASK_STATE_INPUT_REQUIRED:
            status.message.CopyFrom(_agent_message(o.tips or "The agent needs more input.", self.task_id,
                                                   self.context_id, {"awaiting": o.form or {}}))
        elif state == a2a.TASK_STATE_FAILED:
            status.message.CopyFrom(_agent_message(o.error, self.task_id, self.context_id))
        return status

    def artifact(self, text: str | None = None) -> a2a.Artifact:
        art = a2a.Artifact(artifact_id=f"{ANSWER}-{self.task_id}", name=ANSWER,
                           parts=[a2a.Part(text=self.outcome.text if text is None else text)])
        if self.outcome.references:
            art.metadata.CopyFrom(_struct({"references": self.outcome.references, "run_id": self.outcome.run_id}))
        return art

    def task(self, *, with_artifact: bool = True) -> a2a.Task:
        task = a2a.Task(id=self.task_id, context_id=self.context_id, status=self.status(),
                        metadata=_struct({"run_id": self.outcome.run_id}))
        if with_artifact and (self.outcome.text or self.outcome.references):
            task.artifacts.append(self.artifact())
        return task

    def convert(self, ev: events_pb2.RunEvent) -> list[Any]:
        kind = self.outcome.feed(ev)
        if kind == "run_started":
            return [self.task(with_artifact=False)]
        if kind == "message_delta" and ev.message_delta.content and not (
                ev.message_delta.start_to_think or ev.message_delta.end_to_think):
            self._chunks += 1
            return [a2a.TaskArtifactUpdateEvent(task_id=self.task_id, context_id=self.context_id,
                                                artifact=self.artifact(ev.message_delta.content),
                                                append=self._chunks > 1, last_chunk=False)]
        if kind == "run_finished":
            out: list[Any] = []
            if self._chunks or self.outcome.references:  # the last chunk closes the artifact, with its references
                out.append(a2a.TaskArtifactUpdateEvent(task_id=self.task_id, context_id=self.context_id,
                                                       artifact=self.artifact(""), append=self._chunks > 0,
                                                       last_chunk=True))
            out.append(a2a.TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id,
                                                 status=self.status()))
            return out
        return []


class TrellisRequestHandler(RequestHandler):
    def __init__(self, push: PushConfigs) -> None:
        self.push = push

    # ---- runs ------------------------------------------------------------------------------------------------

    async def _start(self, params: a2a.SendMessageRequest, context: ServerCallContext) -> tuple[Caller, canvas_pb.RunRequest, str]:
        """The run a message starts, and its task id ("" for a new task: the run's id)."""
        caller = Caller(context)
        msg = params.message
        texts = [p.text for p in msg.parts if p.WhichOneof("content") == "text"]
        data: dict[str, Any] = {}
        for p in msg.parts:
            if p.WhichOneof("content") == "data" and p.data.WhichOneof("kind") == "struct_value":
                data.update(MessageToDict(p.data.struct_value))
        query, task_id, session_id = "\n".join(texts), msg.task_id, msg.context_id
        if task_id:  # an answer to a task that waits for input
            runs = await self._chain(caller, task_id)
            latest = runs[-1]
            if latest.status != "waiting_for_user":
                raise InvalidParamsError(message=f"task {task_id} is not waiting for input (it is {latest.status}); "
                                                 "send a new message in its context instead")
            if session_id and session_id != latest.session_id:
                raise InvalidParamsError(message="contextId does not match the task's")
            session_id = latest.session_id
            if not data and query and len(form := await self._form(caller, latest.run_id)) == 1:
                data, query = {next(iter(form)): query}, ""
        try:
            req = await call_request(caller.orch, caller.tenant, caller.agent_id, query=query, inputs=data,
                                     session_id=session_id, continue_on_disconnect=True, api_key_id=caller.api_key_id)
        except GatewayError as err:
            raise InvalidParamsError(message=err.message) from None
        return caller, req, task_id

    async def _events(self, caller: Caller, req: canvas_pb.RunRequest, task_id: str, *, last_event_id: str = ""
                      ) -> AsyncGenerator[tuple[RunView, list[Any]], None]:
        try:
            async with caller.orch.run(req, last_event_id=last_event_id) as events:
                view: RunView | None = None
                async for ev in events:
                    if view is None:
                        view = RunView(task_id or ev.run_id)
                    yield view, view.convert(ev)
        except GatewayError as err:
            if err.refusal is not None:  # the tenant over a limit: a refusal with its retry delay
                raise refused(caller.state, err) from None
            if err.code == grpc.StatusCode.NOT_FOUND:
                raise TaskNotFoundError(message=err.message) from None
            raise InvalidParamsError(message=err.message) from None

    async def on_message_send(self, params: a2a.SendMessageRequest, context: ServerCallContext) -> a2a.Task:
        caller, req, task_id = await self._start(params, context)
        view: RunView | None = None
        immediately = params.configuration.return_immediately
        async for view, _ in self._events(caller, req, task_id):
            if immediately:  # the run goes on (continue_on_disconnect); GetTask or SubscribeToTask follow it
                break
        assert view is not None
        await self._keep_push_config(params, caller, view)
        return view.task()

    async def on_message_send_stream(self, params: a2a.SendMessageRequest, context: ServerCallContext
                                     ) -> AsyncGenerator[Any, None]:
        caller, req, task_id = await self._start(params, context)
        first = True
        async for view, out in self._events(caller, req, task_id):
            if first:
                first = False
                await self._keep_push_config(params, caller, view)
            for item in out:
                yield item

    async def _keep_push_config(self, params: a2a.SendMessageRequest, caller: Caller, view: RunView) -> None:
        """The send's push-notification config, kept in the orchestrator, whose outbox delivers the task's
        status changes (gateway/a2a/push.py); the run's end too when it is over already (a blocking send)."""
        if params.configuration.HasField("task_push_notification_config"):
            config = a2a.TaskPushNotificationConfig()
            config.CopyFrom(params.configuration.task_push_notification_config)
            config.task_id = view.task_id
            await self.push.set(caller.orch, caller.tenant, caller.agent_id, config,
                                latest_run_id=view.outcome.run_id)

    # ---- tasks -----------------------------------------------------------------------------------------------

    async def _chain(self, caller: Caller, task_id: str) -> list[canvas_pb.RunInfo]:
        """The runs of task `task_id`: its first run, then each run that resumed the one before."""
        orch = caller.orch
        try:
            first = (await orch.unary(orch.canvas.GetRun, canvas_pb.GetRunRequest(
                tenant_id=caller.tenant, run_id=task_id, agent_id=caller.agent_id))).run
            runs = (await orch.unary(orch.canvas.ListRuns, canvas_pb.ListRunsRequest(
                tenant_id=caller.tenant, session_id=first.session_id, agent_id=caller.agent_id))).runs
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise TaskNotFoundError(message=f"task {task_id} not found") from None
            raise from_rpc_error(exc) from None
        children = {r.parent_run_id: r for r in runs if r.parent_run_id}
        chain = [first]
        while chain[-1].run_id in children and len(chain) <= len(runs):
            chain.append(children[chain[-1].run_id])
        return chain

    async def _replay(self, caller: Caller, task_id: str, run_id: str) -> RunView:
        view = RunView(task_id)
        req = canvas_pb.RunRequest(tenant_id=caller.tenant)
        try:
            async with caller.orch.run(req, last_event_id=f"{run_id}:0", merge=False) as events:
                async for ev in events:
                    view.outcome.feed(ev)
        except GatewayError as err:
            if err.refusal is None:
                raise
            raise refused(caller.state, err) from None  # the tenant's held streams at their limit (WatchRun)
        return view

    async def _form(self, caller: Caller, run_id: str) -> dict[str, Any]:
        return (await self._replay(caller, run_id, run_id)).outcome.form or {}

    async def _task(self, caller: Caller, task_id: str, *, full: bool = True) -> a2a.Task:
        latest = (await self._chain(caller, task_id))[-1]
        state = _STATES.get(latest.status, a2a.TASK_STATE_WORKING)
        if full and state != a2a.TASK_STATE_WORKING:  # a run that ended: its stored stream says what it came to
            return (await self._replay(caller, task_id, latest.run_id)).task()
        task = a2a.Task(id=task_id, context_id=latest.session_id, status=a2a.TaskStatus(state=state),
                        metadata=_struct({"run_id": latest.run_id}))
        if latest.error:
            task.status.message.CopyFrom(_agent_message(latest.error, task_id, latest.session_id))
        return task

    async def on_get_task(self, params: a2a.GetTaskRequest, context: ServerCallContext) -> a2a.Task | None:
        return await self._task(Caller(context), params.id)

    async def on_list_tasks(self, params: a2a.ListTasksRequest, context: ServerCallContext) -> a2a.ListTasksResponse:
        caller, orch = Caller(context), Caller(context).orch
        size = min(params.page_size or 50, 100)
        if params.context_id:
            sessions = [params.context_id]
        else:
            resp = await orch.unary(orch.sessions.ListSessions, session_pb.ListSessionsRequest(
                tenant_id=caller.tenant, agent_id=caller.agent_id, page=1, page_size=size, desc=True))
            sessions = [s.id for s in resp.sessions]
        tasks: list[a2a.Task] = []
        for session_id in sessions:
            try:
                runs = (await orch.unary(orch.canvas.ListRuns, canvas_pb.ListRunsRequest(
                    tenant_id=caller.tenant, session_id=session_id, agent_id=caller.agent_id))).runs
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.FAILED_PRECONDITION):
                    continue
                raise from_rpc_error(exc) from None
            children = {r.parent_run_id: r for r in runs if r.parent_run_id}
            for root in (r for r in runs if not r.parent_run_id):  # newest first, as ListRuns answers
                latest = root
                while latest.run_id in children:
                    latest = children[latest.run_id]
                state = _STATES.get(latest.status, a2a.TASK_STATE_WORKING)
                if params.status != a2a.TASK_STATE_UNSPECIFIED and params.status != state:
                    continue
                tasks.append(a2a.Task(id=root.run_id, context_id=session_id, status=a2a.TaskStatus(state=state),
                                      metadata=_struct({"run_id": latest.run_id})))
        return a2a.ListTasksResponse(tasks=tasks[:size], page_size=size, total_size=len(tasks))

    async def on_cancel_task(self, params: a2a.CancelTaskRequest, context: ServerCallContext) -> a2a.Task | None:
        caller = Caller(context)
        latest = (await self._chain(caller, params.id))[-1]
        if _STATES.get(latest.status) in _TERMINAL:
            raise TaskNotCancelableError(message=f"task {params.id} is {latest.status}")
        await caller.orch.unary(caller.orch.canvas.Cancel, canvas_pb.CancelRequest(
            tenant_id=caller.tenant, run_id=latest.run_id))
        return await self._task(caller, params.id)

    async def on_subscribe_to_task(self, params: a2a.SubscribeToTaskRequest, context: ServerCallContext
                                   ) -> AsyncGenerator[Any, None]:
        caller = Caller(context)
        latest = (await self._chain(caller, params.id))[-1]
        if _STATES.get(latest.status) in _TERMINAL:
            raise UnsupportedOperationError(message=f"task {params.id} is {latest.status}: nothing to subscribe to")
        req = canvas_pb.RunRequest(tenant_id=caller.tenant)
        async for _, out in self._events(caller, req, params.id, last_event_id=f"{latest.run_id}:0"):
            for item in out:
                yield item

    # ---- push notifications: gateway/a2a/push.py (completion webhooks with the A2A payload) -----------------

    async def on_create_task_push_notification_config(self, params: a2a.TaskPushNotificationConfig,
                                                      context: ServerCallContext) -> a2a.TaskPushNotificationConfig:
        caller = Caller(context)
        latest = (await self._chain(caller, params.task_id))[-1]
        return await self.push.set(caller.orch, caller.tenant, caller.agent_id, params, latest_run_id=latest.run_id)

    async def on_get_task_push_notification_config(self, params: a2a.GetTaskPushNotificationConfigRequest,
                                                   context: ServerCallContext) -> a2a.TaskPushNotificationConfig:
        caller = Caller(context)
        for config in await self.push.list(caller.orch, caller.tenant, caller.agent_id, params.task_id):
            if config.id == params.id or not params.id:
                return config
        raise TaskNotFoundError(message=f"no push notification config {params.id!r} for task {params.task_id}")

    async def on_list_task_push_notification_configs(self, params: a2a.ListTaskPushNotificationConfigsRequest,
                                                     context: ServerCallContext
                                                     ) -> a2a.ListTaskPushNotificationConfigsResponse:
        caller = Caller(context)
        return a2a.ListTaskPushNotificationConfigsResponse(
            configs=await self.push.list(caller.orch, caller.tenant, caller.agent_id, params.task_id))

    async def on_delete_task_push_notification_config(self, params: a2a.DeleteTaskPushNotificationConfigRequest,
                                                      context: ServerCallContext) -> None:
        caller = Caller(context)
        await self.push.delete(caller.orch, caller.tenant, caller.agent_id, params.task_id, params.id)

    async def on_get_extended_agent_card(self, params: a2a.GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> a2a.AgentCard:
        from gateway.a2a.cards import agent_card

        caller = Caller(context)
        return await agent_card(caller.orch, caller.tenant, caller.agent_id, context.state["base_url"])


__all__ = ["TrellisRequestHandler"]
