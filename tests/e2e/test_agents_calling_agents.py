"""Agents calling agents, on a real stack (HTTP gateway, orchestrator on a test Redis, llm_gateway with scripted
models): an Agent whose tools are a remote A2A agent (a Trellis agent served by the gateway's /a2a/{id}) and a
child Trellis agent; the child run's own session and its link to the caller; cancelling the caller reaches the
child run and the remote task; the SSRF guard without an allow-list; another tenant's agent is not found."""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb
from trellis.canvas.v1 import session_service_pb2_grpc as session_grpc

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.orchestrator.engine.settings import EngineSettings
from services.orchestrator.runs.children import MAX_DEPTH
from tests.support.agent_services import ECHO, LONG_ANSWER, SLOW, cpn
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator
from tests.support.waiting import eventually

SCRIPTS = {"chat": {
    "slow": [{"reply": LONG_ANSWER, "chunk_delay_s": 0.05}],
    # turn 0 asks the remote agent, turn 1 the child agent, turn 2 answers with what the child said
    "caller": [{"tool_calls": [{"name": "Remote_0", "arguments": {"query": "hi {env.secret}"}}]},
               {"tool_calls": [{"name": "Helper_1", "arguments": {"query": "yo"}}]},
               "Done: {last_tool}"],
}}
HELPER = {"components": {
    "begin": cpn("Begin", ["Message:Out"]),
    "Message:Out": cpn("Message", [], {"content": ["Helper heard: {sys.query}"]}, ("begin",)),
}}


@dataclass
class Stack:
    http: TestClient
    canvas: canvas_grpc.CanvasServiceStub
    sessions: session_grpc.SessionServiceStub
    key_a: str
    key_b: str
    tenant_a: str

    @property
    def url(self) -> str:
        return str(self.http.server.make_url("")).rstrip("/")

    async def create(self, dsl: dict, *, key: str | None = None) -> str:
        resp = await self.http.post("/api/v1/agents", headers={"Authorization": f"Bearer {key or self.key_a}"},
                                    json={"title": uuid.uuid4().hex, "dsl": dsl, "release": True})
        body = await resp.json()
        assert body["code"] == 0, body
        return body["data"]["id"]

    def run(self, agent_id: str, query: str = "go", run_id: str = "") -> Any:
        return self.canvas.Run(canvas_pb.RunRequest(agent=canvas_pb.AgentTarget(agent_id=agent_id),
                                                    tenant_id=self.tenant_a, query=query, run_id=run_id))

    async def get_run(self, run_id: str) -> canvas_pb.RunInfo:
        return (await self.canvas.GetRun(canvas_pb.GetRunRequest(tenant_id=self.tenant_a, run_id=run_id))).run

    async def runs_of_agent(self, agent_id: str) -> list[canvas_pb.RunInfo]:
        """Every run of the agent's sessions (the child's session is its own, not the caller's)."""
        listed = await self.sessions.ListSessions(session_pb.ListSessionsRequest(tenant_id=self.tenant_a,
                                                                                 agent_id=agent_id))
        runs = []
        for session in listed.sessions:
            runs += (await self.canvas.ListRuns(canvas_pb.ListRunsRequest(tenant_id=self.tenant_a,
                                                                          session_id=session.id))).runs
        return runs


@asynccontextmanager
async def stack(redis_url: str, allow: tuple[str, ...]) -> AsyncIterator[Stack]:
    run = uuid.uuid4().hex[:8]
    key_a, key_b = f"svc-a-{run}", f"svc-b-{run}"
    engine = EngineSettings(ssrf_allowlist=allow)
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_url, llm_gateway_addr=llm.addr, engine=engine) as orch:
        cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0,
                            upstreams={"orchestrator": orch.addr, "llm_gateway": llm.addr,
                                       "retrieval": f"127.0.0.1:{free_port()}", "sandbox": f"127.0.0.1:{free_port()}"},
                            api_keys={key_a: f"tenant-a-{run}", key_b: f"tenant-b-{run}"})
        client = TestClient(TestServer(create_app(cfg), host="127.0.0.1"))
        await client.start_server()
        try:
            async with grpc.aio.insecure_channel(orch.addr) as channel:
                yield Stack(client, canvas_grpc.CanvasServiceStub(channel), session_grpc.SessionServiceStub(channel),
                            key_a, key_b, f"tenant-a-{run}")
        finally:
            await client.close()


@pytest.fixture
async def loopback_allowed(redis_server):
    async with stack(redis_server.url, ("127.0.0.1",)) as s:
        yield s


def remote(s: Stack, agent_id: str, name: str = "Remote", key: str | None = None) -> dict:
    return {"component_name": "A2AAgent", "name": name, "params": {
        "url": f"{s.url}/a2a/{agent_id}", "headers": {"Authorization": f"Bearer {key or s.key_a}"}}}


def node_canvas(name: str, params: dict) -> dict:
    return {"components": {
        "begin": cpn("Begin", ["Ask"]),
        "Ask": cpn(name, ["Message:Out"], params, ("begin",)),
        "Message:Out": cpn("Message", [], {"content": ["{Ask@content}"]}, ("Ask",)),
    }}


def of(events: list, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("kind") == kind]


def answer(events: list) -> str:
    return "".join(d.content for e in events if e.WhichOneof("kind") == "message_delta" and not e.path
                   for d in [e.message_delta])


async def test_an_agent_asks_a_remote_a2a_agent_and_a_child_agent(loopback_allowed):
    s = loopback_allowed
    echo, helper = await s.create(ECHO), await s.create(HELPER)
    caller = await s.create({"components": {
        "begin": cpn("Begin", ["Agent:A"]),
        "Agent:A": cpn("Agent", ["Message:Out"], {
            "llm_id": "caller@Scripted", "prompts": [{"role": "user", "content": "{sys.query}"}],
            "tools": [remote(s, echo), {"component_name": "AgentCall", "name": "Helper",
                                        "params": {"agent_id": helper}}]}, ("begin",)),
        "Message:Out": cpn("Message", [], {"content": ["{Agent:A@content}"]}, ("Agent:A",)),
    }})
    run_id = uuid.uuid4().hex
    events = [e async for e in s.run(caller, "ask around", run_id)]
    assert not of(events, "run_finished")[-1].error
    results = {f.tool_name: f.result for f in of(events, "tool_call_finished")}
    # the model's argument reached the remote agent as text: no template of the caller filled in
    assert results == {"Remote_0": "You said: hi {env.secret}", "Helper_1": "Helper heard: yo"}
    assert answer(events) == "Done: Helper heard: yo"

    [child] = await s.runs_of_agent(helper)
    assert child.caller_run_id == run_id and child.status == "succeeded"
    parent = await s.get_run(run_id)
    assert child.session_id != parent.session_id and parent.caller_run_id == ""
    [remote_run] = await s.runs_of_agent(echo)  # through the gateway's A2A door: no caller of this stack's
    assert remote_run.status == "succeeded" and remote_run.caller_run_id == ""


async def test_the_run_api_links_a_child_run_to_its_caller_and_the_callers_trace_names_the_child(loopback_allowed):
    s = loopback_allowed
    helper = await s.create(HELPER)
    caller = await s.create(node_canvas("AgentCall", {"agent_id": helper, "query": "hello"}))
    run_id = uuid.uuid4().hex
    assert not of([e async for e in s.run(caller, run_id=run_id)], "run_finished")[-1].error
    [child] = await s.runs_of_agent(helper)
    auth = {"Authorization": f"Bearer {s.key_a}"}

    async def data(path: str) -> Any:
        body = await (await s.http.get(path, headers=auth)).json()
        assert body["code"] == 0, body
        return body["data"]

    # child -> caller: the child's record names the run whose AgentCall started it; the caller's names none
    got = await data(f"/api/v1/agents/{helper}/runs/{child.run_id}")
    assert got["caller_run_id"] == run_id and got["status"] == "succeeded"
    [listed] = await data(f"/api/v1/agents/{helper}/sessions/{child.session_id}/runs")
    assert listed["id"] == child.run_id and listed["caller_run_id"] == run_id
    assert (await data(f"/api/v1/agents/{caller}/runs/{run_id}"))["caller_run_id"] is None
    # caller -> child: the caller's trace (RAGFlow's node_finished) names the child's agent, run and session
    resp = await s.http.get(f"/api/v1/agents/{caller}/runs/{run_id}/events?dialect=ragflow", headers=auth)
    frames = [line[len("data:"):] for line in (await resp.text()).split("\n") if line.startswith("data:{")]
    [ask] = [e["data"] for e in map(json.loads, frames)
             if e["event"] == "node_finished" and e["data"]["component_type"] == "AgentCall"]
    assert ask["component_id"] == "Ask" and ask["inputs"]["agent_id"] == helper
    assert (ask["outputs"]["run_id"], ask["outputs"]["session_id"]) == (child.run_id, child.session_id)
    # the OpenAPI document describes the field
    schemas = (await (await s.http.get("/openapi.json")).json())["components"]["schemas"]
    assert schemas["RunOut"]["properties"]["caller_run_id"]["description"] == "the run whose AgentCall started this one"


async def test_a_child_node_streams_its_answer_and_cancelling_the_caller_cancels_it(loopback_allowed):
    s = loopback_allowed
    slow = await s.create(SLOW)
    caller = await s.create(node_canvas("AgentCall", {"agent_id": slow, "query": "talk"}))
    run_id = uuid.uuid4().hex
    call = s.run(caller, run_id=run_id)
    events = []
    async for event in call:
        events.append(event)
        if event.WhichOneof("kind") == "message_delta":  # the child streams through the caller's Message
            break
    [child] = await eventually(lambda: s.runs_of_agent(slow), what="the child run")
    assert child.caller_run_id == run_id and child.status == "running"
    assert (await s.canvas.Cancel(canvas_pb.CancelRequest(tenant_id=s.tenant_a, run_id=run_id))).cancelled
    events += [e async for e in call]
    assert of(events, "run_finished")[-1].cancelled
    assert answer(events) and LONG_ANSWER.startswith(answer(events))
    # the child's end is stored before its caller's component ends
    child = await s.get_run(child.run_id)
    assert child.status == "cancelled" and run_id in child.error


async def test_a_remote_node_streams_and_cancelling_the_caller_cancels_the_remote_task(loopback_allowed):
    s = loopback_allowed
    slow = await s.create(SLOW)
    caller = await s.create(node_canvas("A2AAgent", remote(s, slow)["params"]))
    run_id = uuid.uuid4().hex
    call = s.run(caller, run_id=run_id)
    async for event in call:
        if event.WhichOneof("kind") == "message_delta":
            break
    assert (await s.canvas.Cancel(canvas_pb.CancelRequest(tenant_id=s.tenant_a, run_id=run_id))).cancelled
    assert of([e async for e in call], "run_finished")[-1].cancelled
    # the remote task (a run of the slow agent behind the gateway) got CancelTask: it ends cancelled, not answered
    [remote_run] = await s.runs_of_agent(slow)
    done = await eventually(lambda: _ended(s, remote_run.run_id), what="the remote task's end")
    assert done.status == "cancelled"


async def _ended(s: Stack, run_id: str) -> canvas_pb.RunInfo | None:
    info = await s.get_run(run_id)
    return info if info.status not in ("running", "") else None


async def test_another_tenants_agent_is_not_found_through_either_door(loopback_allowed):
    s = loopback_allowed
    theirs = await s.create(ECHO, key=s.key_b)
    for canvas in (node_canvas("AgentCall", {"agent_id": theirs}),
                   node_canvas("A2AAgent", remote(s, theirs)["params"])):  # tenant A's key at B's agent
        events = [e async for e in s.run(await s.create(canvas))]
        error = of(events, "run_finished")[-1].error
        assert error.startswith("Ask: ") and ("not found" in error.lower() or "404" in error), error


async def test_without_the_allow_list_loopback_is_refused_naming_the_component(redis_server):
    async with stack(redis_server.url, ()) as s:
        echo = await s.create(ECHO)
        events = [e async for e in s.run(await s.create(node_canvas("A2AAgent", remote(s, echo)["params"])))]
        error = of(events, "run_finished")[-1].error
        assert error.startswith("Ask: params.url: refused to reach http://127.0.0.1:"), error
        assert "loopback" in error and "SSRF allow-list" in error
        assert await s.runs_of_agent(echo) == []


async def test_an_agent_calling_itself_stops_at_the_nesting_limit(loopback_allowed):
    s = loopback_allowed
    me = await s.create(ECHO)
    resp = await s.http.put(f"/api/v1/agents/{me}", headers={"Authorization": f"Bearer {s.key_a}"},
                            json={"dsl": node_canvas("AgentCall", {"agent_id": me}), "release": True})
    assert (await resp.json())["code"] == 0
    run_id = uuid.uuid4().hex
    events = [e async for e in s.run(me, run_id=run_id)]
    error = of(events, "run_finished")[-1].error
    assert error.startswith("Ask: ") and f"called {MAX_DEPTH + 1} levels deep" in error, error
    runs = {r.run_id: r for r in await s.runs_of_agent(me)}
    chain, link = [], run_id  # each child names its caller: the chain goes MAX_DEPTH deep below the first run
    while (child := next((r for r in runs.values() if r.caller_run_id == link), None)) is not None:
        chain.append(child)
        link = child.run_id
    assert len(chain) == MAX_DEPTH and all(r.status == "failed" for r in chain)
