"""The agents as A2A agents, driven by the official a2a-sdk client (JSON-RPC, 1.0 and the 0.3 method names) against
a real gateway, orchestrator (test Redis) and llm_gateway: send, stream, get and list tasks, an INPUT_REQUIRED
answered, a cancel, a resubscribe after a disconnect, the agent cards, and tenants sealed from each other.

Push notifications are the orchestrator's completion webhooks with the A2A payload, received by a real HTTP
server: the configs outlive the gateway that took them (another gateway on the same orchestrator reads and
deletes them), a failed push is retried with the same Task, and a task's pushes follow it through an answered
INPUT_REQUIRED."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing, asynccontextmanager

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import ParseDict
from trellis.canvas.v1 import webhook_service_pb2 as hook_pb
from trellis.canvas.v1 import webhook_service_pb2_grpc as hook_grpc

from gateway.app import create_app
from services.common.channels import open_channel
from tests.support.agent_services import ECHO, FILL_UP, LONG_ANSWER, SLOW, AgentStack, agent_stack
from tests.support.waiting import eventually

VERSIONS = ["1.0", "0.3"]


@pytest.fixture
async def stack(redis_server):
    async with agent_stack(redis_server.url) as s:
        yield s


@asynccontextmanager
async def a2a_client(stack, agent_id: str, version: str, *, streaming: bool = True, key: str | None = None,
                     url: str = ""):
    """`url`: another gateway's, on the same orchestrator."""
    async with httpx.AsyncClient(headers=stack.auth(key), timeout=60) as http:
        card = await A2ACardResolver(http, f"{url or stack.url}/a2a/{agent_id}").get_agent_card()
        kept = [i for i in card.supported_interfaces if i.protocol_version == version]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(kept)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        try:
            yield client
        finally:
            await client.close()


def message(text: str = "", *, context_id: str = "", task_id: str = "") -> a2a.SendMessageRequest:
    msg = a2a.Message(message_id=uuid.uuid4().hex, role=a2a.ROLE_USER, context_id=context_id, task_id=task_id,
                      parts=[a2a.Part(text=text)] if text else [])
    return a2a.SendMessageRequest(message=msg)


def answer_of(events: list[a2a.StreamResponse]) -> str:
    return "".join(p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts)


def final_state(events: list[a2a.StreamResponse]) -> int:
    states = [e.status_update.status.state if e.HasField("status_update") else e.task.status.state
              for e in events if e.HasField("status_update") or e.HasField("task")]
    return states[-1]


async def collect(stream) -> list[a2a.StreamResponse]:
    return [e async for e in stream]


@pytest.mark.parametrize("version", VERSIONS)
async def test_send_stream_get_list_and_input_required(stack, version):
    echo = await stack.create(ECHO, title="Echo")
    async with a2a_client(stack, echo, version, streaming=False) as client:
        [sent] = await collect(client.send_message(message("hi")))
        task = sent.task
        assert task.status.state == a2a.TASK_STATE_COMPLETED and task.context_id and task.id
        assert task.artifacts[0].parts[0].text == "You said: hi"
    async with a2a_client(stack, echo, version) as client:
        events = await collect(client.send_message(message("again", context_id=task.context_id)))
        assert answer_of(events) == "You said: again"
        assert final_state(events) == a2a.TASK_STATE_COMPLETED
        second = next(e.task for e in events if e.HasField("task"))
        assert second.context_id == task.context_id and second.id != task.id

        got = await client.get_task(a2a.GetTaskRequest(id=task.id))
        assert got.status.state == a2a.TASK_STATE_COMPLETED and got.artifacts[0].parts[0].text == "You said: hi"
        if version == "1.0":  # ListTasks is new in 1.0
            listed = await client.list_tasks(a2a.ListTasksRequest(context_id=task.context_id))
            assert {t.id for t in listed.tasks} == {task.id, second.id}

    form = await stack.create(FILL_UP, title="Travel")
    async with a2a_client(stack, form, version) as client:
        events = await collect(client.send_message(message("trip")))
        assert final_state(events) == a2a.TASK_STATE_INPUT_REQUIRED
        paused = next(e.task for e in events if e.HasField("task"))
        [asked] = [e.status_update.status.message for e in events if e.HasField("status_update")]
        assert asked.parts[0].text == "Which city?"
        events = await collect(client.send_message(message("Lisbon", context_id=paused.context_id,
                                                           task_id=paused.id)))
        assert answer_of(events) == "Going to Lisbon" and final_state(events) == a2a.TASK_STATE_COMPLETED
        assert {e.status_update.task_id for e in events if e.HasField("status_update")} == {paused.id}
        done = await client.get_task(a2a.GetTaskRequest(id=paused.id))
        assert done.status.state == a2a.TASK_STATE_COMPLETED


@pytest.mark.parametrize("version", VERSIONS)
async def test_resubscribe_after_a_disconnect_then_cancel(stack, version):
    slow = await stack.create(SLOW, title="Talker")
    async with a2a_client(stack, slow, version) as client:
        async with aclosing(client.send_message(message("talk"))) as stream:  # leaves after the first chunk
            async for event in stream:
                if event.HasField("task"):
                    task = event.task
                if event.HasField("artifact_update"):
                    break
        events = await collect(client.subscribe(a2a.SubscribeToTaskRequest(id=task.id)))
        assert answer_of(events) == LONG_ANSWER and final_state(events) == a2a.TASK_STATE_COMPLETED

        async with aclosing(client.send_message(message("talk more", context_id=task.context_id))) as stream:
            async for event in stream:
                if event.HasField("task"):
                    running = event.task
                if event.HasField("artifact_update"):
                    break
        cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=running.id))
        assert cancelled.status.state in (a2a.TASK_STATE_CANCELED, a2a.TASK_STATE_WORKING)
        got = await client.get_task(a2a.GetTaskRequest(id=running.id))
        events = [] if got.status.state == a2a.TASK_STATE_CANCELED else await collect(
            client.subscribe(a2a.SubscribeToTaskRequest(id=running.id)))
        assert a2a.TASK_STATE_CANCELED in (got.status.state, final_state(events) if events else None)


async def test_cards_and_tenants_are_sealed(stack):
    agent_a = await stack.create(ECHO, title="Secret", description="A's own.")
    async with httpx.AsyncClient(base_url=stack.url) as http:
        root = (await http.get("/.well-known/agent-card.json", headers=stack.auth())).json()
        assert [s["id"] for s in root["skills"]] == [agent_a]
        assert (await http.get("/.well-known/agent-card.json", headers=stack.auth(stack.key_b))).json().get(
            "skills", []) == []
        assert (await http.get("/.well-known/agent-card.json")).json().get("skills", []) == []
        card = (await http.get(f"/a2a/{agent_a}/.well-known/agent-card.json", headers=stack.auth())).json()
        assert card["name"] == "Secret" and card["description"] == "A's own."
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0", "0.3"}
        assert card["url"].endswith(f"/a2a/{agent_a}")  # what 0.3 clients read
        for key, status in ((stack.key_b, 404), ("wrong", 401)):
            assert (await http.get(f"/a2a/{agent_a}/.well-known/agent-card.json",
                                   headers=stack.auth(key))).status_code == status
            resp = await http.post(f"/a2a/{agent_a}", headers=stack.auth(key), json={
                "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}})
            assert resp.status_code == status
    async with a2a_client(stack, agent_a, "1.0") as client:
        events = await collect(client.send_message(message("hi")))
        task_id = next(e.task.id for e in events if e.HasField("task"))
    agent_b = await stack.create(ECHO, title="B's", key=stack.key_b)
    async with a2a_client(stack, agent_b, "1.0", key=stack.key_b) as client_b:
        with pytest.raises(Exception, match="not found"):
            await client_b.get_task(a2a.GetTaskRequest(id=task_id))
        listed = await client_b.list_tasks(a2a.ListTasksRequest())
        assert task_id not in {t.id for t in listed.tasks}


async def test_push_notifications_post_the_task_to_the_webhook(stack):
    received: list[tuple[dict, str]] = []
    completed = asyncio.Event()

    async def webhook(request: web.Request) -> web.Response:
        body = await request.json()
        received.append((body, request.headers.get("X-A2A-Notification-Token", "")))
        if body.get("task", body).get("status", {}).get("state") == "TASK_STATE_COMPLETED":
            completed.set()
        return web.Response()

    app = web.Application()
    app.router.add_post("/hook", webhook)
    server = TestServer(app)
    await server.start_server()
    try:
        slow = await stack.create(SLOW, title="Talker")
        async with a2a_client(stack, slow, "1.0", streaming=False) as client:
            request = message("talk")
            request.configuration.task_push_notification_config.url = str(server.make_url("/hook"))
            request.configuration.task_push_notification_config.token = "secret-token"
            request.configuration.return_immediately = True
            [sent] = await collect(client.send_message(request))
            task_id = sent.task.id
            configs = await client.list_task_push_notification_configs(
                a2a.ListTaskPushNotificationConfigsRequest(task_id=task_id))
            assert [c.url for c in configs.configs] == [str(server.make_url("/hook"))]
            await asyncio.wait_for(completed.wait(), 60)
    finally:
        await server.close()
    body, token = received[-1]
    task = body.get("task", body)
    assert token == "secret-token" and task["id"] == task_id
    assert task["artifacts"][0]["parts"][0]["text"] == LONG_ANSWER


class PushReceiver:
    """A real HTTP server for push notifications: answers each with the next of `statuses` (then 200), keeps
    (Task as the SDK parses it, token, Authorization header, raw body) of each."""

    def __init__(self, statuses: tuple[int, ...] = ()) -> None:
        self.statuses = list(statuses)
        self.received: list[tuple[a2a.Task, str, str, bytes]] = []
        self._server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        pushed = ParseDict(await request.json(), a2a.StreamResponse())  # the A2A shape, or this raises
        self.received.append((pushed.task, request.headers.get("X-A2A-Notification-Token", ""),
                              request.headers.get("Authorization", ""), body))
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200)

    def states(self) -> list[int]:
        return [task.status.state for task, *_ in self.received]

    async def __aenter__(self) -> "PushReceiver":
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self._server = TestServer(app)
        await self._server.start_server()
        self.url = str(self._server.make_url("/hook"))
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        await self._server.close()


@asynccontextmanager
async def webhooks(stack: AgentStack):
    """The orchestrator's WebhookService, for the deliveries' records."""
    channel = open_channel(stack.config.upstreams["orchestrator"])
    try:
        yield hook_grpc.WebhookServiceStub(channel)
    finally:
        await channel.close()


async def test_push_configs_outlive_the_gateway_that_took_them(stack):
    echo = await stack.create(ECHO, title="Echo")
    async with PushReceiver() as receiver:
        async with a2a_client(stack, echo, "1.0", streaming=False) as client:
            [sent] = await collect(client.send_message(message("hi")))
            task_id = sent.task.id
            config = a2a.TaskPushNotificationConfig(task_id=task_id, id="mine", url=receiver.url, token="t-1")
            config.authentication.scheme, config.authentication.credentials = "Bearer", "receiver-key"
            await client.create_task_push_notification_config(config)
        # a second gateway (a replica, or this one restarted) on the same orchestrator
        other = TestClient(TestServer(create_app(stack.config)))
        await other.start_server()
        try:
            other_url = str(other.server.make_url("")).rstrip("/")
            async with a2a_client(stack, echo, "1.0", streaming=False, url=other_url) as client:
                listed = await client.list_task_push_notification_configs(
                    a2a.ListTaskPushNotificationConfigsRequest(task_id=task_id))
                assert [(c.id, c.url, c.token, c.authentication.scheme) for c in listed.configs] == [
                    ("mine", receiver.url, "t-1", "Bearer")]
                got = await client.get_task_push_notification_config(
                    a2a.GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine"))
                assert got.url == receiver.url
                # the task had completed when the config was set: its end is pushed to it
                await eventually(lambda: receiver.received, what="the completed task's push")
                task, token, authorization, _ = receiver.received[0]
                assert (task.id, task.status.state, token, authorization) == (
                    task_id, a2a.TASK_STATE_COMPLETED, "t-1", "Bearer receiver-key")
                assert task.artifacts[0].parts[0].text == "You said: hi"
                await client.delete_task_push_notification_config(
                    a2a.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="mine"))
        finally:
            await other.close()
    async with a2a_client(stack, echo, "1.0", streaming=False) as client:
        listed = await client.list_task_push_notification_configs(
            a2a.ListTaskPushNotificationConfigsRequest(task_id=task_id))
        assert list(listed.configs) == []


async def test_a_failed_push_is_retried_with_the_same_task(stack):
    form = await stack.create(FILL_UP, title="Travel")
    async with PushReceiver(statuses=(500,)) as receiver, webhooks(stack) as hooks:
        async with a2a_client(stack, form, "1.0", streaming=False) as client:
            request = message("trip")
            request.configuration.task_push_notification_config.url = receiver.url
            request.configuration.task_push_notification_config.token = "t-2"
            [sent] = await collect(client.send_message(request))
            task = sent.task
            assert task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
            await eventually(lambda: len(receiver.received) >= 2, what="the push and its retry")
            first, again = receiver.received[:2]
            assert first[3] == again[3] and first[1] == "t-2"  # the same notification, byte for byte
            assert first[0].id == task.id and first[0].status.state == a2a.TASK_STATE_INPUT_REQUIRED
            assert first[0].status.message.parts[0].text == "Which city?"

            deliveries = (await hooks.ListRunDeliveries(hook_pb.ListRunDeliveriesRequest(
                tenant_id=stack.config.api_keys[stack.key_a], run_id=task.id))).deliveries
            [push] = [d for d in deliveries if d.source == "a2a"]
            assert push.state == "delivered" and [a.status_code for a in push.attempts] == [500, 200]

            # the answer resumes the task in a new run: its end is pushed to the same config, as the same task
            [done] = await collect(client.send_message(message("Lisbon", context_id=task.context_id,
                                                               task_id=task.id)))
            assert done.task.status.state == a2a.TASK_STATE_COMPLETED
            await eventually(lambda: a2a.TASK_STATE_COMPLETED in receiver.states(), what="the completed push")
            completed = next(t for t, *_ in receiver.received if t.status.state == a2a.TASK_STATE_COMPLETED)
            assert completed.id == task.id and completed.artifacts[0].parts[0].text == "Going to Lisbon"
            assert completed.metadata["run_id"] != task.id
