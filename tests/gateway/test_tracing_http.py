"""The gateway's HTTP spans: the client's `traceparent` is their parent (a malformed one starts a new trace),
and the orchestrator's gRPC span is their child through the metadata."""

from __future__ import annotations

import asyncio

import aiohttp
from opentelemetry.trace import SpanKind, StatusCode

from services.common import tracing
from tests.support.waiting import eventually

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


async def _server_spans(spans, name: str) -> list:
    """The orchestrator's server spans named `name`: a server ends its span once it has sent the answer, so the
    gateway may have the answer first."""
    return await eventually(lambda: [s for s in spans.get_finished_spans() if s.name == name], what=f"the {name} span")


async def test_the_clients_traceparent_is_the_parent_and_the_orchestrator_a_child(stack, spans):
    stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.get("/api/v1/agents", headers={**stack.auth(), "traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert (await resp.json())["code"] == 0
    finished = spans.get_finished_spans()
    [http] = [s for s in finished if s.kind == SpanKind.SERVER and s.name == "GET /api/v1/agents"]
    assert format(http.context.trace_id, "032x") == TRACE_ID and format(http.parent.span_id, "016x") == PARENT
    assert http.attributes["http.response.status_code"] == 200 and http.attributes["http.request.method"] == "GET"
    [rpc] = await _server_spans(spans, "trellis.canvas.v1.AgentService/ListAgents")
    assert rpc.parent.span_id == http.context.span_id and rpc.parent.is_remote


async def test_a_malformed_traceparent_starts_a_new_trace_and_probes_are_not_traced(stack, spans):
    resp = await stack.client.get("/api/v1/agents", headers={**stack.auth(), "traceparent": "00-nonsense-01"})
    assert (await resp.json())["code"] == 0
    await stack.client.get("/metrics")
    [http] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER and s.name.startswith("GET")]
    assert http.parent is None and http.name == "GET /api/v1/agents"


async def test_off_the_gateway_answers_the_same_and_makes_no_span(stack):
    assert not tracing.ACTIVE
    resp = await stack.client.get("/api/v1/agents", headers={**stack.auth(), "traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert (await resp.json())["code"] == 0


async def test_a_client_that_leaves_mid_stream_is_not_a_server_error(stack, spans):
    agent = stack.fake.add_agent(stack.tenant_a)
    stack.fake.run_cancelled = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        resp = await http.post(f"{stack.url}/api/v1/agents/{agent.id}/stream", json={"query": "hang"}, headers=stack.auth())
        seen = b""
        while b"tick" not in seen:
            seen += await asyncio.wait_for(resp.content.readany(), 5)
        resp.close()
        await asyncio.wait_for(stack.fake.run_cancelled.wait(), 30)
    for _ in range(100):  # the handler's span ends once aiohttp has cancelled it
        http_spans = [s for s in spans.get_finished_spans() if s.name == "POST /api/v1/agents/{agent_id}/stream"]
        if http_spans:
            break
        await asyncio.sleep(0.05)
    [span] = http_spans
    assert span.attributes["trellis.http.client_gone"] is True
    assert "http.response.status_code" not in span.attributes and span.status.status_code != StatusCode.ERROR


async def test_grpc_server_spans_carry_the_status_and_fail_only_on_server_errors(stack, spans):
    body = await (await stack.client.get("/api/v1/agents/no-such-agent", headers=stack.auth())).json()
    assert body["code"] != 0
    [rpc] = await _server_spans(spans, "trellis.canvas.v1.AgentService/GetAgent")
    assert rpc.attributes["rpc.grpc.status_code"] == 5  # NOT_FOUND: the caller's mistake, not a failed server
    assert rpc.status.status_code != StatusCode.ERROR
