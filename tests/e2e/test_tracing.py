"""OpenTelemetry across every hop: HTTP gateway -> orchestrator -> llm_gateway, retrieval (-> llm_gateway
embeddings) and sandbox, each a real server on its own port in this process, spans into an in-memory exporter.

One canvas (Retrieval -> Agent with a retrieval tool -> CodeExec -> Message) runs under a client's own
`traceparent`; every span lands in that trace with the right parent. Each service's SERVER span has a
*remote* parent: the context really crossed the hop in gRPC metadata, it did not leak through a contextvar.
"""

from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import create_app
from gateway.config import GatewayConfig
from services.sandbox.config import SandboxConfig
from services.sandbox.limits import Limits
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.retrieval import embedding_gateway, running_stack
from tests.support.sandbox import sandbox_server, sandbox_servicer

KEY = "trace-key"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
HANDBOOK = "# Backups\nRedis writes its append-only file every second. Snapshots are kept for fourteen days.\n"
CHAT = {"answerer": [{"tool_calls": [{"name": "search_my_dateset_0", "arguments": {"query": "snapshots backups"}}]},
                     "Snapshots are kept for fourteen days."]}


def _cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


def _canvas(dataset_id: str) -> dict:
    retrieval = {"kb_ids": [dataset_id], "top_n": 3, "similarity_threshold": 0.0, "keywords_similarity_weight": 0.7}
    return {"components": {
        "begin": _cpn("Begin", ["Retrieval:Find"]),
        "Retrieval:Find": _cpn("Retrieval", ["Agent:Answer"], retrieval, ["begin"]),
        "Agent:Answer": _cpn("Agent", ["CodeExec:Count"], {
            "llm_id": "answerer@Scripted", "sys_prompt": "Answer from the handbook.", "max_rounds": 2,
            "tools": [{"component_name": "Retrieval", "name": "Search", "params": retrieval}]}, ["Retrieval:Find"]),
        "CodeExec:Count": _cpn("CodeExec", ["Message:Reply"], {
            "lang": "python", "arguments": {"text": "Agent:Answer@content"},
            "script": "def main(text):\n    return len(text.split())"}, ["Agent:Answer"]),
        "Message:Reply": _cpn("Message", [], {"content": ["{Agent:Answer@content} ({CodeExec:Count@result} words)"]},
                              ["CodeExec:Count"]),
    }}


@asynccontextmanager
async def _stack(redis_url: str, tmp_path: Path):
    sandbox_cfg = SandboxConfig.for_tests(defaults=Limits(wall_time_ms=8_000, cpu_time_ms=4_000))
    async with embedding_gateway() as embed_addr, running_stack("sqlite", tmp_path, embed_addr) as kb:
        dataset = await kb.dataset("handbook", size=64)
        await kb.ingest(dataset.id, "handbook.md", HANDBOOK)
        async with (llm_gateway({"chat": CHAT}) as chat,
                    sandbox_server(await sandbox_servicer(sandbox_cfg)) as sandbox,
                    orchestrator(redis_url, llm_gateway_addr=chat.addr, retrieval_addr=f"127.0.0.1:{kb.port}",
                                 sandbox_addr=sandbox.addr) as orch):
            cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0, api_keys={KEY: kb.tenant},
                                upstreams={"orchestrator": orch.addr, "llm_gateway": chat.addr,
                                           "retrieval": f"127.0.0.1:{kb.port}", "sandbox": sandbox.addr})
            client = TestClient(TestServer(create_app(cfg)))
            await client.start_server()
            try:
                yield client, dataset.id
            finally:
                await client.close()


async def test_one_trace_from_the_client_through_every_service(redis_server, tmp_path, spans):
    async with _stack(redis_server.url, tmp_path) as (client, dataset_id):
        headers = {"Authorization": f"Bearer {KEY}"}
        body = await (await client.post("/api/v1/agents", headers=headers,
                                        json={"title": f"traced {time.monotonic_ns()}", "dsl": _canvas(dataset_id)})).json()
        assert body["code"] == 0, body
        spans.clear()  # set-up traffic (ingestion, agent creation) is not the run
        resp = await client.post(f"/api/v1/agents/{body['data']['id']}/stream", json={"query": "How long are snapshots kept?"},
                                 headers={**headers, "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})
        frames = [json.loads(line[len("data: "):]) for line in (await resp.read()).decode().splitlines() if line.startswith("data: ")]
        answer = "".join(f["data"]["delta"] for f in frames if f["type"] == "content")
        assert answer == "Snapshots are kept for fourteen days. (6 words)", frames
        assert resp.headers["X-Request-Id"]

    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    assert {format(s.context.trace_id, "032x") for s in finished} == {TRACE_ID}, "every span is in the client's trace"

    def one(name: str, **attrs):
        found = [s for s in finished if s.name == name and all(s.attributes.get(k) == v for k, v in attrs.items())]
        assert len(found) == 1, (name, attrs, sorted(s.name for s in finished))
        return found[0]

    def parent(span):
        return by_id.get(span.parent.span_id) if span.parent else None

    def server(method: str, service: str, under):
        """The service's SERVER span for `method` whose remote parent is `under` (exactly one)."""
        found = [s for s in finished if s.name == method and s.attributes["trellis.service"] == service
                 and s.parent.span_id == under.context.span_id]
        assert len(found) == 1, (method, service, under.name, [(s.name, parent(s).name) for s in finished if s.name == method])
        assert found[0].kind == SpanKind.SERVER and found[0].parent.is_remote, "the context came in the metadata"
        assert found[0].attributes["rpc.system"] == "grpc"
        return found[0]

    http = one("POST /api/v1/agents/{agent_id}/stream")
    assert http.kind == SpanKind.SERVER and http.parent.is_remote
    assert format(http.parent.span_id, "016x") == CLIENT_SPAN, "the incoming traceparent is the HTTP span's parent"
    assert http.attributes["http.response.status_code"] == 200 and http.attributes["http.route"].endswith("/stream")

    run_rpc = server("trellis.canvas.v1.CanvasService/Run", "orchestrator", http)
    run = one("run")
    assert run.attributes["trellis.run.status"] == "succeeded" and run.attributes["trellis.run.id"] == frames[0]["run_id"]
    assert run.attributes["gen_ai.usage.output_tokens"] > 0
    assert parent(run) is run_rpc or parent(parent(run)) is run_rpc  # directly, or under the run manager's span

    components = {}
    for cid, ctype in [("begin", "Begin"), ("Retrieval:Find", "Retrieval"), ("Agent:Answer", "Agent"),
                       ("CodeExec:Count", "CodeExec"), ("Message:Reply", "Message")]:
        c = components[cid] = one(f"component {ctype}", **{"trellis.component.id": cid})
        assert parent(c) is run
        assert c.attributes["trellis.component.type"] == ctype and c.attributes["trellis.component.status"] == "succeeded"
        assert c.attributes["trellis.component.retries"] == 0 and c.status.status_code != StatusCode.ERROR

    # Retrieval component -> retrieval span -> retrieval service -> llm_gateway embeddings
    find = one("retrieval", **{"trellis.component.id": "Retrieval:Find"})
    assert parent(find) is components["Retrieval:Find"] and find.attributes["trellis.retrieval.chunks"] >= 1
    search = server("trellis.retrieval.v1.RetrievalService/Search", "retrieval", find)
    assert [s for s in finished if s.attributes.get("trellis.service") == "llm_gateway" and parent(s) is search]

    # Agent -> model calls (GenAI spans in the llm_gateway) and its tool -> retrieval -> retrieval service
    agent = components["Agent:Answer"]
    # A CodeExec reads the Agent's answer, not a Message: each turn comes whole, in one Complete call.
    chats = [s for s in finished if s.name == "trellis.llm.v1.LlmService/Complete" and parent(s) is agent]
    assert len(chats) == 2, "two model turns: the tool call, then the answer"
    for rpc in chats:
        assert rpc.parent.is_remote
        [gen_ai] = [s for s in finished if parent(s) is rpc and s.name == "chat answerer"]
        assert gen_ai.kind == SpanKind.CLIENT
        assert gen_ai.attributes["gen_ai.operation.name"] == "chat"
        assert gen_ai.attributes["gen_ai.request.model"] == "answerer"
        assert gen_ai.attributes["gen_ai.usage.input_tokens"] > 0 and gen_ai.attributes["gen_ai.usage.output_tokens"] > 0
    reasons = sorted(tuple(s.attributes["gen_ai.response.finish_reasons"]) for s in finished if s.name == "chat answerer")
    assert reasons == [("stop",), ("tool_calls",)]
    tool = one("execute_tool search_my_dateset_0")
    assert parent(tool) is agent and tool.attributes["gen_ai.tool.name"] == "search_my_dateset_0"
    [tool_retrieval] = [s for s in finished if s.name == "retrieval" and parent(s) is tool]
    server("trellis.retrieval.v1.RetrievalService/Search", "retrieval", tool_retrieval)

    # CodeExec -> sandbox span -> the sandbox service's Execute
    sandbox = one("sandbox execute")
    assert parent(sandbox) is components["CodeExec:Count"]
    assert sandbox.attributes["trellis.sandbox.ok"] is True and sandbox.attributes["trellis.sandbox.language"] == "python"
    server("trellis.sandbox.v1.SandboxService/Execute", "sandbox", sandbox)
