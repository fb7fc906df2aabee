"""Canvases that answer from a dataset, end to end through the real services.

Every test ingests a small handbook into a REAL retrieval service (SQLite backend, bag-of-words embeddings
from a real llm_gateway), then runs a canvas whose models are scripted in a second real llm_gateway:
- Begin -> Retrieval -> LLM -> Message through the real orchestrator over gRPC: the answer cites the
  document's chunk as [ID:n] and `message_end` carries that chunk under key n, in RAGFlow's shape.
- LLM `cite` as RAGFlow: the citation prompt only with chunks and `cite` on; `<CITATION_GUIDELINES>`.
- The RAGFlow templates `your_starter_dataset_chatbot.json` and `reflective_academic_paper_generator.json`
  as shipped, except what the shipped file cannot know: each Retrieval tool's `kb_ids` (empty in the
  templates) becomes the test's dataset id (`with_dataset`, on the DSL params). Their models are scripted,
  or the template's own model ids on a real-shaped provider, or the model fallback
  (tests/support/template_models.py).

The scripted answers cite chunk ids computed from the ingested chunks (`hash_str2int`, RAGFlow's
citation id), which is why the chat gateway is started after ingestion.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from services.orchestrator.components import _llm
from services.orchestrator.components.retrieval import hash_str2int
from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import (
    MessageDelta,
    MessageEnd,
    NodeFinished,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.engine.validate import compile_plan
from tests.support.canvas import cpn, of
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.retrieval import embedding_gateway, running_stack
from tests.support.template_models import MODES, template_models

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"  # see NOTICE.md there
HANDBOOK = """# Trellis operations handbook

## Ports
The gateway listens on port 8080. The orchestrator listens on port 50051.

## Backups
Redis writes its append-only file every second. Snapshots are kept for fourteen days.

## Escalation
Page the on-call engineer when the error rate stays above two percent for ten minutes.
"""
CHUNK_KEYS = {"id", "content", "document_id", "document_name", "dataset_id", "image_id", "positions", "url",
              "similarity", "vector_similarity", "term_similarity", "doc_type"}


@pytest.fixture
async def kb(tmp_path):
    """A retrieval service holding handbook.md in a dataset, one chunk per section, with distinct citation ids."""
    async with embedding_gateway() as addr, running_stack("sqlite", tmp_path, addr) as stack:
        ds = await stack.dataset("handbook", size=32, overlap=0)
        for _ in range(5):  # citation ids are chunk ids mod 500: make sure the three differ
            doc = await stack.ingest(ds.id, "handbook.md", HANDBOOK)
            assert doc.status == rr_pb.DOCUMENT_STATUS_DONE, doc.error
            found = (await stack.search("gateway port backups snapshots escalation error", [ds.id], top_n=10,
                                        keywords_similarity_weight=0.0)).chunks
            if len({hash_str2int(c.id) for c in found}) == len(found) == doc.chunk_count:
                break
            await stack.stub.DeleteDocument(rr_pb.DeleteDocumentRequest(tenant_id=stack.tenant, dataset_id=ds.id,
                                                                        document_id=doc.id), timeout=30)
        else:
            pytest.fail("could not get distinct citation ids")
        assert doc.chunk_count == 3
        stack.dataset_id, stack.document_id = ds.id, doc.id
        stack.cite = {key: hash_str2int(next(c.id for c in found if key in c.content))
                      for key in ("8080", "fourteen days", "two percent")}
        yield stack


async def run_in_engine(dsl: dict[str, Any], svc: Services, *, query: str, tenant: str) -> list[Any]:
    plan = compile_plan(load_canvas(dsl))
    req = RunRequest(run_id="run-1", session_id="s-1", query=query, tenant_id=tenant)
    events = [ev async for ev in run(plan, req, None, svc)]
    assert isinstance(events[-1], RunFinished)
    assert events[-1].error is None, events[-1].error
    return events


def retrieval_llm_canvas(dataset_id: str, **llm_params: Any) -> dict[str, Any]:
    return {"components": {
        "begin": cpn("Begin", ["Retrieval:Find"]),
        "Retrieval:Find": cpn("Retrieval", ["LLM:Answer"], {
            "kb_ids": [dataset_id], "top_n": 3, "similarity_threshold": 0.1, "keywords_similarity_weight": 0.7,
            "empty_response": "Nothing found."}, up=["begin"]),
        "LLM:Answer": cpn("LLM", ["Message:Reply"], {
            "llm_id": "answerer@Scripted", "prompts": [{"role": "user", "content": "{sys.query}"}],
            "sys_prompt": "Answer from the knowledge base only.\n{Retrieval:Find@formalized_content}", **llm_params},
            up=["Retrieval:Find"]),
        "Message:Reply": cpn("Message", [], {"content": ["{LLM:Answer@content}"]}, up=["LLM:Answer"]),
    }, "history": [], "path": [], "retrieval": []}


def check_reference(reference: dict[str, Any], answer: str, kb: Any, cited: list[int]) -> None:
    """RAGFlow's shape, and every [ID:n] of the answer is a chunk of the reference from the document."""
    assert [int(i) for i in _llm.cited_ids(answer)] == cited
    assert set(reference) == {"chunks", "doc_aggs"}
    for key, chunk in reference["chunks"].items():
        assert set(chunk) >= CHUNK_KEYS and key == str(hash_str2int(chunk["id"]))
        assert chunk["document_id"] == kb.document_id and chunk["dataset_id"] == kb.dataset_id
        assert chunk["document_name"] == "handbook.md" and 0 < chunk["similarity"] <= 1
    for n in cited:
        assert str(n) in reference["chunks"]
    assert reference["doc_aggs"] == {"handbook.md": {"doc_name": "handbook.md", "doc_id": kb.document_id,
                                                     "count": len(reference["chunks"])}}


# ------------------------------------------------------------------------------------ Retrieval -> LLM
async def test_retrieval_llm_message_through_the_orchestrator_cites_the_chunk(kb, redis_server):
    n = kb.cite["8080"]
    reply = f"The gateway listens on port 8080 [ID:{n}]."
    async with llm_gateway({"chat": {"answerer": [reply]}}) as chat:
        chat_addr, provider = chat.addr, chat.scripted
        async with orchestrator(redis_server.url, llm_gateway_addr=chat_addr,
                                retrieval_addr=f"127.0.0.1:{kb.port}") as orch:
            async with grpc.aio.insecure_channel(orch.addr) as ch:
                req = canvas_pb.RunRequest(tenant_id=kb.tenant, query="Which port does the gateway listen on?",
                                           dsl_json=json.dumps(retrieval_llm_canvas(kb.dataset_id)))
                events = [e async for e in canvas_grpc.CanvasServiceStub(ch).Run(req, timeout=60)]
        [(_, call)] = provider.calls
    assert not events[-1].run_finished.error, events[-1].run_finished.error
    answer = "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta")
    assert answer == reply
    [end] = [e.message_end for e in events if e.WhichOneof("kind") == "message_end"]
    reference = json.loads(end.reference_json)
    check_reference(reference, answer, kb, [n])
    assert "8080" in reference["chunks"][str(n)]["content"]
    # What the model was shown: the retrieved blocks with their citation ids, and RAGFlow's citation rules.
    system = call.messages[0]
    assert system.role == "system" and system.content.rstrip().endswith(_llm.CITATION_PROMPT.strip())
    assert f"ID: {n}\n├── Title: handbook.md" in system.content
    assert call.messages[-1].content == "Which port does the gateway listen on?"


async def test_llm_cite_prompt_only_with_chunks_and_cite_on_and_the_authors_guidelines_win(kb):
    scripts = {"answerer": ["Port 8080."]}
    guidelines = "Cite every sentence as (source n)."
    cases = [
        ({}, "gateway port", True),  # chunks and cite (default on)
        ({"cite": False}, "gateway port", False),
        ({}, "volcano eruption", False),  # nothing retrieved: no chunks in the references
    ]
    async with llm_gateway({"chat": scripts}) as chat:
        client, provider = chat.client, chat.scripted
        svc = Services(llm=client, retrieval=kb.client)
        ends = []
        for params, query, _ in cases:
            dsl = retrieval_llm_canvas(kb.dataset_id, **params)
            dsl["components"]["Retrieval:Find"]["obj"]["params"]["similarity_threshold"] = 0.3
            events = await run_in_engine(dsl, svc, query=query, tenant=kb.tenant)
            ends.append(of(events, MessageEnd, "Message:Reply")[0])
        tagged = retrieval_llm_canvas(kb.dataset_id, sys_prompt=(
            f"Be brief.<CITATION_GUIDELINES>{guidelines}</CITATION_GUIDELINES>\n{{Retrieval:Find@formalized_content}}"))
        await run_in_engine(tagged, svc, query="gateway port", tenant=kb.tenant)
        systems = [c.messages[0].content for _, c in provider.calls]
    for (_, _, cites), system in zip(cases, systems):
        assert (_llm.CITATION_PROMPT.strip() in system) is cites, system
    assert "Nothing found." in systems[2] and ends[2].reference == {}  # the empty_response; no reference
    assert ends[0].reference["chunks"] and ends[1].reference["chunks"]  # Message sends the run's chunks either way
    assert guidelines in systems[3] and _llm.CITATION_PROMPT.strip() not in systems[3]
    assert "CITATION_GUIDELINES" not in systems[3] and systems[3].startswith("Be brief.")


def test_extract_prompts_and_cited_ids():
    found, rest = _llm.extract_prompts("A<reflection>r</reflection>B<Citation_Guidelines>\nc\n</Citation_Guidelines>C")
    assert found == {"reflection": "r", "citation_guidelines": "\nc\n"} and rest == "ABC"
    assert _llm.citation_prompt(found) == "\nc\n" and _llm.citation_prompt({}) == _llm.CITATION_PROMPT
    assert _llm.cited_ids("a [ID:12] b [ID: 7][ID:12] [ID:x] ID:3") == ["12", "7"]


# ------------------------------------------------------------------------------------ the templates
def template(name: str) -> dict[str, Any]:
    return json.loads((TEMPLATES / name).read_text(encoding="utf-8"))


def with_dataset(node: Any, dataset_id: str) -> Any:
    """Every Retrieval (component or Agent tool) searches `dataset_id`: its `kb_ids` param is replaced."""
    if isinstance(node, dict):
        out = {k: with_dataset(v, dataset_id) for k, v in node.items()}
        if out.get("component_name") == "Retrieval" and isinstance(out.get("params"), dict):
            out["params"] = {**out["params"], "kb_ids": [dataset_id]}
        return out
    if isinstance(node, list):
        return [with_dataset(v, dataset_id) for v in node]
    return node


def agent_text(events: list[Any], message_id: str) -> tuple[str, dict[str, Any]]:
    answer = "".join(d.content for d in of(events, MessageDelta, message_id))
    [end] = of(events, MessageEnd, message_id)
    return answer, end.reference


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # llm_id "": the default model, no fallback to make
async def test_your_starter_dataset_chatbot_answers_from_the_dataset_with_citations(kb, mode):
    n = kb.cite["8080"]
    reply = f"## Answer\n\nAccording to the documentation, the gateway listens on port 8080 [ID:{n}]."
    scripts = {"docs": [{"tool_calls": [{"name": "search_my_dateset_0", "arguments": {"query": "gateway port"}}]},
                        {"reply": reply, "chunk_chars": 16, "chunk_delay_s": 0.1}]}
    dsl = with_dataset(template("your_starter_dataset_chatbot.json"), kb.dataset_id)
    async with template_models(mode, scripts, default="docs") as tm:  # llm_id is ""
        events = await run_in_engine(dsl, Services(llm=tm.llm.client, retrieval=kb.client), tenant=kb.tenant,
                                     query="What port does the gateway use?")
        first, second = tm.calls_to("docs")
    tm.check(events)
    agent = "Agent:StalePandasDream"
    [started] = of(events, ToolCallStarted, agent)
    [done] = of(events, ToolCallFinished, agent)
    assert started.tool_name == "search_my_dateset_0" and started.arguments == {"query": "gateway port"}
    assert done.error is None and f"ID: {n}\n├── Title: handbook.md" in done.result and "8080" in done.result
    answer, reference = agent_text(events, "Message:BrownPugsStick")
    # streamed: more than one piece (how many depends on this machine's speed, see test_templates_e2e.py)
    assert answer == reply and len(of(events, MessageDelta, "Message:BrownPugsStick")) > 1
    check_reference(reference, answer, kb, [n])
    # The template's prompt reached the model; the citation prompt joined it once the tool brought chunks.
    assert [t.name for t in first.tools] == ["search_my_dateset_0"]
    assert first.tools[0].description == "This is  a technical docs knowledge bases."
    assert first.sampling.temperature == pytest.approx(0.1)
    assert first.messages[0].content.startswith("# Role\n\nYou are the **Docs QA Agent**")
    assert _llm.CITATION_PROMPT.strip() not in first.messages[0].content
    assert second.messages[0].content.rstrip().endswith(_llm.CITATION_PROMPT.strip())
    assert first.messages[-1].content == "The user query is What port does the gateway use?"
    assert second.messages[-1].role == "tool" and f"ID: {n}" in second.messages[-1].content


@pytest.mark.parametrize("mode", MODES)
async def test_reflective_academic_paper_generator_researches_in_rounds_and_cites_both_sources(kb, mode):
    backups, escalation = kb.cite["fourteen days"], kb.cite["two percent"]
    report = (f"# Operations report\n\n*Retention*: snapshots are kept for fourteen days [ID:{backups}]. "
              "**Escalation**: page the on-call engineer when the error rate stays above two percent "
              f"[ID:{escalation}].")
    scripts = {"researcher": [
        {"tool_calls": [{"name": "search_my_dateset_0", "arguments": {"query": "backups snapshots kept"}}]},
        {"tool_calls": [{"name": "search_my_dateset_0", "arguments": {"query": "escalation error rate percent"}}]},
        {"reply": report}]}
    dsl = with_dataset(template("reflective_academic_paper_generator.json"), kb.dataset_id)
    # The template's model (Qwen3-235B-A22B-Instruct-2507) has a 262,144-token context and the template asks
    # for max_tokens 128000: the engine must know the context to leave the prompt room next to that answer.
    svc = Services(llm=None, retrieval=kb.client, extra={"llm_context_tokens": 262_144})
    async with template_models(mode, scripts, {"qwen3-235b-a22b-instruct-2507@Tongyi-Qianwen": "researcher"}) as tm:
        svc.llm = tm.llm.client
        events = await run_in_engine(tm.dsl(dsl), svc, query="Write a short report on backups and escalation.",
                                     tenant=kb.tenant)
        calls = tm.calls_to("researcher")
    tm.check(events)
    agent = "Agent:NewPumasLick"
    assert [e.arguments["query"] for e in of(events, ToolCallStarted, agent)] == [
        "backups snapshots kept", "escalation error rate percent"]
    results = [e.result for e in of(events, ToolCallFinished, agent)]
    assert f"ID: {backups}" in results[0] and f"ID: {escalation}" in results[1]
    answer, reference = agent_text(events, "Message:OrangeYearsShine")
    assert answer == report
    check_reference(reference, answer, kb, [backups, escalation])  # chunks of both rounds, one reference
    assert len(calls) == 3 and calls[0].max_tokens == 128000  # maxTokensEnabled in the template
    assert "Knowledge Base Retrieval Q\\&A Agent" in calls[0].messages[0].content  # the whole prompt, untrimmed
    assert "LaTeX formula requirements" in calls[0].messages[0].content
    assert [_llm.CITATION_PROMPT.strip() in c.messages[0].content for c in calls] == [False, True, True]
    assert calls[0].messages[-1].content == "# User Query\n Write a short report on backups and escalation."


def example(name: str) -> dict[str, Any]:
    return json.loads((TEMPLATES.parent / "dsl_examples" / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("mode", MODES)
async def test_cajal_scientific_paper_agent_drafts_from_the_retrieved_evidence(kb, mode):
    n = kb.cite["two percent"]
    draft = f"## Escalation policy\n\nThe on-call engineer is paged above a two percent error rate [ID:{n}]."
    scripts = {"cajal": [
        {"tool_calls": [{"name": "search_my_dateset_0", "arguments": {"query": "escalation error rate"}}]},
        draft]}
    dsl = with_dataset(template("cajal_scientific_paper_agent.json"), kb.dataset_id)
    async with template_models(mode, scripts, {"agnuxo/cajal-4b-p2pclaw@Ollama": "cajal"}) as tm:
        events = await run_in_engine(tm.dsl(dsl), Services(llm=tm.llm.client, retrieval=kb.client),
                                     query="Draft the escalation section.", tenant=kb.tenant)
        first, second = tm.calls_to("cajal")
    tm.check(events)
    [done] = of(events, ToolCallFinished, "Agent:NewPumasLick")
    assert done.error is None and f"ID: {n}" in done.result and "two percent" in done.result
    answer, reference = agent_text(events, "Message:OrangeYearsShine")
    assert answer == draft
    check_reference(reference, answer, kb, [n])
    assert first.messages[0].content.startswith("## Role & Task\nYou are **CAJAL**")
    assert first.messages[-1].content.startswith("# Research request\nDraft the escalation section.")
    assert first.sampling.temperature == pytest.approx(0.2) and first.max_tokens == 32768


@pytest.mark.parametrize("mode", MODES)
async def test_smart_customer_service_specialist_routes_a_usage_question_to_the_guide(kb, mode):
    n = kb.cite["fourteen days"]
    guide = f"1. Open the backup panel.\n2. Snapshots stay for fourteen days [ID:{n}]."
    scripts = {"service": {"rules": [
        {"when": {"system_contains": "You are a product usage guide assistant"}, "reply": guide},
        {"when": {"system_contains": "Product Feature Comparison", "contains": "backups"},
         "reply": "Product Usage Guide"},  # the Categorize
        {"reply": "WRONG AGENT"}]}}
    dsl = with_dataset(template("smart_customer_service_specialist.json"), kb.dataset_id)
    async with template_models(mode, scripts, {"deepseek-v4-pro@default@DeepSeek": "service"}) as tm:
        events = await run_in_engine(tm.dsl(dsl), Services(llm=tm.llm.client, retrieval=kb.client),
                                     query="How long are backups kept?", tenant=kb.tenant)
        calls = tm.calls_to("service")
    tm.check(events)
    ran = {e.node_id for e in of(events, NodeFinished) if not e.skipped and e.node_id != "begin"}
    assert ran == {"Categorize:NewDonkeysShare", "Retrieval:EagerTipsFeel", "Agent:ShinyCooksCall",
                   "VariableAggregator:GentleLawsSneeze", "Message:KhakiSymbolsMarry"}  # the other two branches: skipped
    answer, reference = agent_text(events, "Message:KhakiSymbolsMarry")
    assert answer == guide
    check_reference(reference, answer, kb, [n])
    [guide_call] = [c for c in calls if "usage guide assistant" in c.messages[0].content]
    assert "fourteen days" in guide_call.messages[-1].content  # the Retrieval's chunks, as the template's prompt


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, message", [("retrieval_and_generate.json", "message:0"),
                                           ("retrieval_categorize_and_generate.json", "message:1")])
async def test_retrieval_examples_answer_from_the_dataset(kb, mode, name, message):
    n = kb.cite["8080"]
    reply = f"The gateway listens on port 8080 [ID:{n}]."
    scripts = {"assistant": {"rules": [
        {"when": {"system_contains": "product_related"}, "reply": "product_related"},  # the Categorize
        {"reply": reply}]}}
    dsl = with_dataset(example(name), kb.dataset_id)
    async with template_models(mode, scripts, {"deepseek-chat": "assistant"}) as tm:
        events = await run_in_engine(tm.dsl(dsl), Services(llm=tm.llm.client, retrieval=kb.client),
                                     query="Which port does the gateway use?", tenant=kb.tenant)
        answering = [c for c in tm.calls_to("assistant") if "product_related" not in c.messages[0].content]
    tm.check(events)
    answer, reference = agent_text(events, message)
    assert answer == reply
    check_reference(reference, answer, kb, [n])
    assert f"ID: {n}\n├── Title: handbook.md" in answering[-1].messages[0].content
