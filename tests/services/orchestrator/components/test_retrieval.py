"""The Retrieval component against a real retrieval service (real llm_gateway with scripted embeddings), and a
Begin -> Retrieval -> Message canvas through the real orchestrator whose message_end carries the reference."""

from __future__ import annotations

import json

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.retrieval import TOOL_NAME, Retrieval, hash_str2int
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest, SessionState
from tests.support.orchestrator import orchestrator
from tests.support.retrieval import embedding_gateway, running_stack

GUIDE = "# Trellis guide\n\n## Ports\n\nThe gateway listens on port 8080. The orchestrator listens on port 50051.\n"


@pytest.fixture
async def kb(tmp_path):
    """A running retrieval service with one dataset ("handbook") holding guide.md."""
    async with embedding_gateway() as llm, running_stack("sqlite", tmp_path, llm) as stack:
        ds = await stack.dataset("handbook")
        doc = await stack.ingest(ds.id, "guide.md", GUIDE, metadata='{"team": "platform"}')
        stack.dataset_id, stack.document_id = ds.id, doc.id
        yield stack


def _ctx(stack, params, **kw) -> NodeContext:
    ctx = NodeContext.for_test(params, component_id="Retrieval:R", component_name="Retrieval",
                               services=Services(retrieval=stack.client),
                               request=RunRequest(run_id="r", tenant_id=kw.pop("tenant", stack.tenant)), **kw)
    ctx.env.state = SessionState.fresh()
    ctx.env.state.retrieval.append({"chunks": {}, "doc_aggs": {}})
    return ctx


async def test_outputs_and_references(kb):
    ctx = _ctx(kb, {"kb_ids": [kb.dataset_id], "top_n": 3}, globals_={"sys.query": "user: which port does the gateway use"})
    await Retrieval("Retrieval:R", ctx.params).run(ctx)
    chunks = ctx.output("json")
    assert chunks and chunks[0]["document_id"] == kb.document_id and chunks[0]["document_name"] == "guide.md"
    assert set(chunks[0]) >= {"id", "content", "dataset_id", "similarity", "vector_similarity", "term_similarity", "positions"}
    text = ctx.output("formalized_content")
    cite = hash_str2int(chunks[0]["id"])
    assert text.startswith(f"\nID: {cite}\n├── Title: guide.md\n├── team: platform\n└── Content:\n")
    assert "8080" in text
    assert ctx.inputs["query"] == "which port does the gateway use"  # RAGFlow strips a leading "user:"
    ref = ctx.env.state.retrieval[-1]
    assert ref["chunks"][str(cite)]["id"] == chunks[0]["id"]
    assert ref["doc_aggs"] == {"guide.md": {"doc_name": "guide.md", "doc_id": kb.document_id, "count": len(chunks)}}


async def test_dataset_by_name_through_a_reference_and_query_template(kb):
    params = {"kb_ids": ["Begin:b@kb"], "query": "Tell me about {Begin:b@topic}", "keywords_similarity_weight": 1.0}
    ctx = _ctx(kb, params, outputs={"Begin:b": {"kb": ["handbook"], "topic": "orchestrator port"}})
    await Retrieval("Retrieval:R", params).run(ctx)
    assert ctx.inputs["query"] == "Tell me about orchestrator port"
    assert ctx.output("json")[0]["dataset_id"] == kb.dataset_id


async def test_nothing_found_gives_the_empty_response(kb):
    params = {"kb_ids": [kb.dataset_id], "empty_response": "Nothing in the handbook.", "similarity_threshold": 0.99,
              "query": "volcano"}
    ctx = _ctx(kb, params)
    await Retrieval("Retrieval:R", params).run(ctx)
    assert ctx.output("formalized_content") == "Nothing in the handbook." and ctx.output("json") == []
    assert ctx.env.state.retrieval[-1]["chunks"] == {}
    empty_query = _ctx(kb, {"kb_ids": [kb.dataset_id], "empty_response": "ask me"}, globals_={"sys.query": ""})
    await Retrieval("Retrieval:R", empty_query.params).run(empty_query)
    assert empty_query.output("formalized_content") == "ask me"


async def test_errors_name_the_component_and_field(kb):
    cases = [
        ({"kb_ids": []}, {}, "params.kb_ids: No dataset is selected."),
        ({"kb_ids": ["0" * 32]}, {}, "params.kb_ids"),
        ({"kb_ids": [kb.dataset_id]}, {"tenant": "someone-else"}, "not found"),  # another tenant's dataset
    ]
    for params, kw, expected in cases:
        ctx = _ctx(kb, {**params, "query": "port"}, **kw)
        with pytest.raises(Exception) as err:
            await Retrieval("Retrieval:R", ctx.params).run(ctx)
        assert str(err.value).startswith("Retrieval:R: ") and expected in str(err.value), str(err.value)
    no_service = NodeContext.for_test({"kb_ids": ["x"], "query": "q"}, component_id="Retrieval:R")
    with pytest.raises(RuntimeError, match="no retrieval service"):
        await Retrieval("Retrieval:R", no_service.params).run(no_service)
    issues = Retrieval.check("Retrieval:R", {"top_n": "many", "keywords_similarity_weight": 2})
    assert {i.field for i in issues} == {"params.top_n", "params.keywords_similarity_weight"}


async def test_agent_tool_call(kb):
    meta = Retrieval.tool_meta(Retrieval.params_model(description="Platform handbook."))
    assert meta["name"] == TOOL_NAME == "search_my_dateset" and meta["parameters"]["required"] == ["query"]
    ctx = _ctx(kb, {"kb_ids": [kb.dataset_id]})
    text = await Retrieval("Retrieval:R", ctx.params).call_tool(ctx, {"query": "gateway port"})
    assert "└── Content:" in text and ctx.env.state.retrieval[-1]["chunks"]


def _canvas(dataset_id: str) -> str:
    comps = {
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Retrieval:R"], "upstream": []},
        "Retrieval:R": {"obj": {"component_name": "Retrieval", "params": {
            "kb_ids": [dataset_id], "query": "{sys.query}", "top_n": 2, "similarity_threshold": 0.1,
            "keywords_similarity_weight": 0.7, "empty_response": "nothing"}},
            "downstream": ["Message:Out"], "upstream": ["begin"]},
        "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["{Retrieval:R@formalized_content}"]}},
                        "downstream": [], "upstream": ["Retrieval:R"]},
    }
    return json.dumps({"components": comps, "history": [], "path": [], "retrieval": []})


async def test_canvas_answers_from_the_document_with_a_reference(kb, redis_server, tmp_path):
    async with orchestrator(redis_server.url, retrieval_addr=f"127.0.0.1:{kb.port}") as orch:
        async with grpc.aio.insecure_channel(orch.addr) as ch:
            stub = canvas_grpc.CanvasServiceStub(ch)
            req = canvas_pb.RunRequest(tenant_id=kb.tenant, dsl_json=_canvas(kb.dataset_id), query="gateway port")
            events = [e async for e in stub.Run(req, timeout=30)]
    assert not events[-1].run_finished.error, events[-1].run_finished.error
    answer = "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta")
    assert "The gateway listens on port 8080" in answer and "├── Title: guide.md" in answer
    end = [e.message_end for e in events if e.WhichOneof("kind") == "message_end"]
    reference = json.loads(end[-1].reference_json)
    chunk = next(iter(reference["chunks"].values()))
    assert chunk["document_id"] == kb.document_id and "8080" in chunk["content"]
    assert f"ID: {hash_str2int(chunk['id'])}" in answer  # the citation id the LLM would use
    assert reference["doc_aggs"]["guide.md"]["doc_id"] == kb.document_id
