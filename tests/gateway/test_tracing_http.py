"""The gateway's HTTP spans: the client's `traceparent` is their parent (a malformed one starts a new trace),
and the orchestrator's gRPC span is their child through the metadata."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.common import tracing

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing.use(None)
    provider.shutdown()


async def test_the_clients_traceparent_is_the_parent_and_the_orchestrator_a_child(stack, spans):
    stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.get("/api/v1/agents", headers={**stack.auth(), "traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert (await resp.json())["code"] == 0
    finished = spans.get_finished_spans()
    [http] = [s for s in finished if s.kind == SpanKind.SERVER and s.name == "GET /api/v1/agents"]
    assert format(http.context.trace_id, "032x") == TRACE_ID and format(http.parent.span_id, "016x") == PARENT
    assert http.attributes["http.response.status_code"] == 200 and http.attributes["http.request.method"] == "GET"
    [rpc] = [s for s in finished if s.name == "trellis.canvas.v1.AgentService/ListAgents"]
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
