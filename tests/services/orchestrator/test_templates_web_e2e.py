"""RAGFlow's canvases that search the web, end to end: the real tools (TavilySearch, Google, Bing, DuckDuckGo,
Wikipedia, YahooFinance...) against one local fake speaking each service's API (tests/support/fake_web_services.py), models
scripted in a real llm_gateway, the real sandbox and retrieval services where a template needs them.

The canvases (tests/data, see NOTICE.md) run as shipped except, for Retrieval, the dataset id; their models
are scripted, or a real-shaped provider the template's own model ids resolve to, or the model fallback
(tests/support/template_models.py). Each test checks the
run reaches RunFinished without error, what the tools sent, what the models were shown, the answer, and
the references `message_end` carries (RAGFlow's shape: chunks by citation id, doc_aggs by title).
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from services.orchestrator.components.retrieval import hash_str2int
from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import MessageEnd, NodeFinished, RunFinished, ToolCallFinished
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.engine.validate import compile_plan
from tests.support.canvas import of, run_canvas, services
from tests.support.data import DATA
from tests.support.fake_web_api import allow_local
from tests.support.fake_web_services import fake_web, slug, tavily_results
from tests.support.sandbox import sandbox_service
from tests.support.template_models import MODES, template_models


def canvas(path: str) -> dict[str, Any]:
    """A canvas of tests/data, as shipped."""
    return json.loads((DATA / path).read_text(encoding="utf-8"))


def citation(content: str) -> str:
    """The key of a web result in the references (RAGFlow: hash of the hash of its content)."""
    return str(hash_str2int(str(hash_str2int(content))))


def finished(events: list[Any]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished) and last.error is None, last.error
    return last


def answer(events: list[Any], node: str) -> str:
    [done] = of(events, NodeFinished, node)
    return done.outputs["content"]


def reference(events: list[Any]) -> dict[str, Any]:
    ends = [e for e in of(events, MessageEnd) if e.reference]
    assert ends, "no message_end carried references"
    return ends[-1].reference


def urls(ref: dict[str, Any]) -> set[str]:
    return {c["url"] for c in ref["chunks"].values()}


@pytest.fixture
async def web(monkeypatch):
    async with fake_web(monkeypatch) as api:
        yield api


@pytest.mark.parametrize("mode", MODES)
async def test_tavily_and_generate_searches_as_a_canvas_node_and_the_llm_answers_from_it(web, mode):
    scripts = {"writer": ["Solid-state cells lead the market [ID:0]."]}
    async with template_models(mode, scripts, {"deepseek-chat": "writer"}) as tm:
        events = await run_canvas(tm.dsl(canvas("dsl_examples/tavily_and_generate.json")),
                                  services(tm.llm, settings=allow_local()), query="solid state batteries")
        [call] = tm.calls_to("writer")
    finished(events)
    tm.check(events)
    [seen] = web.seen("/search")
    assert seen.json["query"] == "solid state batteries"
    assert seen.headers["Authorization"].startswith("Bearer tvly-dev-")  # the DSL's own key
    system = call.messages[0].content
    assert "Overview of solid state batteries: the key facts." in system
    assert "├── URL: https://web.example/solid-state-batteries/1" in system
    [msg] = of(events, NodeFinished, "message:0")
    assert msg.outputs["content"] == "Solid-state cells lead the market [ID:0]."
    ref = reference(events)
    assert urls(ref) == {r["url"] for r in tavily_results("solid state batteries")}
    first = tavily_results("solid state batteries")[0]
    assert ref["chunks"][citation(first["content"])]["document_name"] == first["title"]
    assert ref["doc_aggs"][first["title"]]["url"] == first["url"]


ITERATION_SCRIPTS = {"researcher": {"rules": [
    {"when": {"system_contains": "decompose"}, "reply": '["battery chemistry", "charging networks"]'},
    {"when": {"system_contains": "battery chemistry overview"}, "reply": "REPORT on battery chemistry."},
    {"when": {"system_contains": "charging networks overview"}, "reply": "REPORT on charging networks."},
]}}


@pytest.mark.parametrize("mode", MODES)
async def test_iteration_example_runs_its_body_once_per_sub_topic(web, mode):
    async with template_models(mode, ITERATION_SCRIPTS, {"deepseek-chat": "researcher"}) as tm:
        events = await run_canvas(tm.dsl(canvas("dsl_examples/iteration.json")),
                                  services(tm.llm, settings=allow_local()), query="electric vehicles")
        calls = tm.calls_to("researcher")
    finished(events)
    tm.check(events)
    assert sorted(s.json["query"] for s in web.seen("/search")) == ["battery chemistry", "charging networks"]
    reports = [c for c in calls if "based on information from the internet" in c.messages[0].content]
    assert len(reports) == 2
    for c in reports:  # each item's Agent read its own item's search results
        item = "battery chemistry" if "battery chemistry overview" in c.messages[0].content else "charging networks"
        assert f'answer the following question or topic: "{item} "' in c.messages[0].content
    bodies = [e for e in of(events, NodeFinished, "generate:1")]
    assert sorted(e.outputs["content"] for e in bodies) == ["REPORT on battery chemistry.", "REPORT on charging networks."]
    # The shipped Message reads `{iteration:0@generate:1}`, an output the Iteration does not declare: RAGFlow
    # renders it empty too. The references hold both searches' results (by title: two contents may share a
    # citation id, which is RAGFlow's content hash modulo 500, and then the first one keeps it).
    ref = reference(events)
    assert {a["url"] for a in ref["doc_aggs"].values()} == {r["url"] for q in ("battery chemistry", "charging networks")
                                                            for r in tavily_results(q)}
    assert 2 <= len(ref["chunks"]) <= 4


async def test_iteration_example_with_declared_outputs_collects_the_reports_in_item_order(web):
    dsl = canvas("dsl_examples/iteration.json")
    dsl["components"]["iteration:0"]["obj"]["params"]["outputs"] = {"reports": {"ref": "generate:1@content"}}
    dsl["components"]["message:0"]["obj"]["params"]["content"] = ["{iteration:0@reports}"]
    async with template_models("scripted", ITERATION_SCRIPTS, {"deepseek-chat": "researcher"}) as tm:
        events = await run_canvas(tm.dsl(dsl), services(tm.llm, settings=allow_local()), query="electric vehicles")
    finished(events)
    [msg] = of(events, NodeFinished, "message:0")
    assert json.loads(msg.outputs["content"]) == ["REPORT on battery chemistry.", "REPORT on charging networks."]


@pytest.mark.parametrize("mode", MODES)
async def test_categorize_then_an_agent_with_tavily(web, mode):
    scripts = {"router": {"rules": [
        {"when": {"system_contains": "product_related"}, "reply": "product_related"},
        {"when": {"last_role": "tool"}, "reply": "The X200 charges in 40 minutes (source: {last_tool})"},
        {"tool_calls": [{"name": "tavily_search_0", "arguments": {"query": "X200 charging time"}}]}]}}
    async with template_models(mode, scripts, {"deepseek-chat": "router"}) as tm:
        events = await run_canvas(tm.dsl(canvas("dsl_examples/categorize_and_agent_with_tavily.json")),
                                  services(tm.llm, settings=allow_local()), query="How fast does the X200 charge?")
        agent_call = [c for c in tm.calls_to("router") if c.tools][0]
    finished(events)
    tm.check(events)
    assert [t.name for t in agent_call.tools] == ["tavily_search_0"]  # `llm_enabled_tools`, the pre-0.20 key
    assert [s.json["query"] for s in web.seen("/search")] == ["X200 charging time"]
    [done] = of(events, ToolCallFinished, "agent:0")
    assert done.error is None and "Overview of X200 charging time" in done.result
    content = answer(events, "message:1")
    assert content.startswith("The X200 charges in 40 minutes (source: \nID:")
    assert urls(reference(events)) == {r["url"] for r in tavily_results("X200 charging time")}


def agent(marker: str, reply: str, *calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Scripted rules for the agent whose system prompt holds `marker`: call the tools, then reply."""
    rules: list[dict[str, Any]] = []
    if calls:
        rules.append({"when": {"system_contains": marker, "turn": 0},
                      "tool_calls": [{"name": n, "arguments": a} for n, a in calls]})
    return [*rules, {"when": {"system_contains": marker}, "reply": reply}]


def order(prompt: str) -> dict[str, str]:
    return {"user_prompt": prompt, "reasoning": "next stage", "context": "{last_tool}"}


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # fallback: the as-shipped test below
async def test_deep_research_lead_and_sub_agents_search_and_read_the_web(web, mode):
    models = {"qwen-max@Tongyi-Qianwen": "lead", "qwen-plus@Tongyi-Qianwen": "searcher",
              "moonshot-v1-auto@Moonshot": "reader", "moonshot-v1-128k@Moonshot": "writer"}
    scripts = {
        "lead": [{"tool_calls": [{"name": "Web_Search_Specialist_0", "arguments": order("find sources on EV batteries")},
                                 {"name": "Content_Deep_Reader_1", "arguments": order("read https://web.example/ev-battery-market/1")}]},
                 {"tool_calls": [{"name": "Research_Synthesizer_2", "arguments": order("write the report")}]},
                 "FINAL REPORT\n{last_tool}"],
        "searcher": [{"tool_calls": [{"name": "tavily_search_0", "arguments": {"query": "EV battery market"}}]},
                     "URLs found: {last_tool}"],
        "reader": [{"tool_calls": [{"name": "tavily_extract_0", "arguments": {"urls": ["https://web.example/ev-battery-market/1"]}}]},
                   "Extracted: {last_tool}"],
        "writer": ["Report: EV batteries are growing fast."]}
    async with template_models(mode, scripts, models) as tm:
        events = await run_canvas(tm.dsl(canvas("templates/deep_research.json")),
                                  services(tm.llm, settings=allow_local()), query="EV battery market outlook")
        lead_second = tm.calls_to("lead")[1]
    finished(events)
    tm.check(events)
    [search] = web.seen("/search")
    assert search.json["query"] == "EV battery market" and search.json["max_results"] == 5  # the template's params
    assert search.headers["Authorization"] == "Bearer tavily-env-key"  # api_key "" in the template: TAVILY_API_KEY
    assert web.seen("/extract")[0].json["urls"] == ["https://web.example/ev-battery-market/1"]
    observed = [m.content for m in lead_second.messages if m.role == "tool"]
    assert any("Overview of EV battery market: the key facts." in o for o in observed)
    assert any("Page text of https://web.example/ev-battery-market/1" in o for o in observed)
    assert answer(events, "Message:OrangeYearsShine") == "FINAL REPORT\nReport: EV batteries are growing fast."
    assert urls(reference(events)) == {r["url"] for r in tavily_results("EV battery market")}


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # llm_id "": the default model, no fallback to make
async def test_trip_planner_searches_and_extracts_then_plans(web, mode):
    scripts = {"web": {"rules": [
        *agent("Professional tour guide", "ITINERARY: three days in Lisbon."),
        *agent("Transit & Stay Agent", "STAY: {last_tool}",
               ("tavily_search_0", {"query": "Lisbon hotels"}),
               ("tavily_extract_1", {"urls": ["https://web.example/lisbon-hotels/1"]})),
        *agent("Result Generator", "PLAN: day 1 Alfama, day 2 Belem, day 3 Sintra.")]}}
    async with template_models(mode, scripts, default="web") as tm:
        events = await run_canvas(canvas("templates/trip_planner.json"), services(tm.llm, settings=allow_local()),
                                  query="Plan 3 days in Lisbon from Paris")
        generator = [c for c in tm.calls_to("web") if "Result Generator" in c.messages[0].content][-1]
    finished(events)
    tm.check(events)
    assert [s.json["query"] for s in web.seen("/search")] == ["Lisbon hotels"]
    assert [s.json["urls"] for s in web.seen("/extract")] == [["https://web.example/lisbon-hotels/1"]]
    assert "ITINERARY: three days in Lisbon." in generator.messages[-1].content
    assert "STAY: " in generator.messages[-1].content and "Page text of https://web.example/lisbon-hotels/1" in (
        generator.messages[-1].content)
    assert answer(events, "Message:ThickEyesUnite") == "PLAN: day 1 Alfama, day 2 Belem, day 3 Sintra."
    assert urls(reference(events)) == {r["url"] for r in tavily_results("Lisbon hotels")}


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # llm_id "": the default model, no fallback to make
async def test_seo_article_writer_lead_runs_outline_body_and_editor_agents(web, mode):
    scripts = {"web": {"rules": [
        {"when": {"system_contains": "You are the **Lead Agent**", "turn": 0},
         "tool_calls": [{"name": "Outline_Agent_0", "arguments": order("outline a post on home composting")}]},
        {"when": {"system_contains": "You are the **Lead Agent**", "turn": 1},
         "tool_calls": [{"name": "Body_Agent_1", "arguments": order("write the body")}]},
        {"when": {"system_contains": "You are the **Lead Agent**", "turn": 2},
         "tool_calls": [{"name": "Editor_Agent_2", "arguments": order("edit it")}]},
        {"when": {"system_contains": "You are the **Lead Agent**"}, "reply": "FINAL ARTICLE\n{last_tool}"},
        *agent("You are the **Outline Agent**", "OUTLINE: {last_tool}",
               ("tavily_search_0", {"query": "home composting basics"})),
        *agent("You are the **Body Agent**", "BODY written.", ("tavily_search_0", {"query": "compost ratio"})),
        *agent("You are the **Editor Agent**", "EDITED ARTICLE about composting.")]}}
    async with template_models(mode, scripts, default="web") as tm:
        events = await run_canvas(canvas("templates/seo_article_writer.json"), services(tm.llm, settings=allow_local()),
                                  query="Write an SEO blog post about home composting")
    finished(events)
    tm.check(events)
    assert [s.json["query"] for s in web.seen("/search")] == ["home composting basics", "compost ratio"]
    lead = "Agent:LuckyApplesGrab"
    assert [e.tool_name for e in of(events, ToolCallFinished, lead)] == ["Outline_Agent_0", "Body_Agent_1",
                                                                        "Editor_Agent_2"]
    outline = of(events, ToolCallFinished, lead)[0].result
    assert outline.startswith("OUTLINE: \nID:") and "Overview of home composting basics" in outline
    assert answer(events, "Message:ModernSwansThrow") == "FINAL ARTICLE\nEDITED ARTICLE about composting."
    assert {a["url"] for a in reference(events)["doc_aggs"].values()} == {
        r["url"] for q in ("home composting basics", "compost ratio") for r in tavily_results(q)}


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # llm_id "": the default model, no fallback to make
async def test_market_seo_article_writer_chains_four_agents_two_of_them_searching(web, mode):
    scripts = {"web": {"rules": [
        *agent("You are the **Parse_And_Keyword_Agent**", "KEYWORDS: compost bins, small gardens"),
        *agent("You are the **Outline_Agent**", "OUTLINE: 1. Why 2. How", ("tavily_search_0", {"query": "compost bins"})),
        *agent("You are the **Body_Agent**", "BODY: bins turn waste into soil.",
               ("tavily_search_0", {"query": "compost bin sizes"})),
        *agent("You are the **Editor_Agent**", "FINAL POST: Compost bins for small gardens.")]}}
    async with template_models(mode, scripts, default="web") as tm:
        events = await run_canvas(canvas("templates/market_seo_article_writer.json"),
                                  services(tm.llm, settings=allow_local()), query="A post on compost bins")
        editor = [c for c in tm.calls_to("web") if "**Editor_Agent**" in c.messages[0].content][-1]
    finished(events)
    tm.check(events)
    assert [s.json["query"] for s in web.seen("/search")] == ["compost bins", "compost bin sizes"]
    assert "KEYWORDS: compost bins" in editor.messages[-1].content and "BODY: bins turn waste" in editor.messages[-1].content
    assert answer(events, "Message:LegalBeansBet") == "FINAL POST: Compost bins for small gardens."
    assert {a["url"] for a in reference(events)["doc_aggs"].values()} == {
        r["url"] for q in ("compost bins", "compost bin sizes") for r in tavily_results(q)}


# ------------------------------------------------------------------------------ templates with a dataset too
GUIDE = "# Composting guide\n\nA compost pile needs a carbon to nitrogen ratio of about thirty to one.\n"
REPORT = "# NVDA research report\n\nAnalysts expect NVDA data center revenue to keep growing in 2026.\n"


@pytest.fixture
async def kb(retrieval):
    """A real retrieval service with one dataset holding the composting guide and the NVDA report."""
    ds = await retrieval.dataset("research")
    for name, text in (("composting.md", GUIDE), ("nvda_report.md", REPORT)):
        await retrieval.ingest(ds.id, name, text)
    retrieval.dataset_id = ds.id
    return retrieval


def with_dataset(node: Any, dataset_id: str) -> Any:
    """Every Retrieval's `kb_ids` (empty or another deployment's ids in the templates) -> the test's dataset."""
    if isinstance(node, dict):
        if node.get("component_name") == "Retrieval" and isinstance(node.get("params"), dict):
            node["params"]["kb_ids"] = [dataset_id]
        for v in node.values():
            with_dataset(v, dataset_id)
    elif isinstance(node, list):
        for v in node:
            with_dataset(v, dataset_id)
    return node


async def run_for(dsl: dict[str, Any], svc: Services, query: str, tenant: str) -> list[Any]:
    plan = compile_plan(load_canvas(dsl))
    req = RunRequest(run_id="run-1", session_id="s-1", query=query, tenant_id=tenant)
    return [ev async for ev in run(plan, req, None, svc)]


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # llm_id "": the default model, no fallback to make
async def test_web_search_assistant_asks_every_search_engine_and_the_dataset(web, kb, mode):
    q = "compost carbon nitrogen ratio"
    scripts = {"web": {"rules": [
        *agent("Question Refinement Agent", q),
        *agent("Search-Driven Information Agent", "WEB: {last_tool}",
               ("tavily_search_0", {"query": q}), ("tavily_extract_1", {"urls": ["https://web.example/x"]}),
               ("google_search_2", {"q": q}), ("bing_search_3", {"query": q}),
               ("duckduckgo_search_4", {"query": q}), ("wikipedia_search_5", {"query": "Compost"})),
        *agent("Answer Organizer", "About 30:1 carbon to nitrogen.")]}}
    dsl = with_dataset(canvas("templates/web_search_assistant.json"), kb.dataset_id)
    async with template_models(mode, scripts, default="web") as tm:
        svc = Services(settings=allow_local(), llm=tm.llm.client, retrieval=kb.client)
        events = await run_for(dsl, svc, "how much brown vs green in compost?", kb.tenant)
        organizer = [c for c in tm.calls_to("web") if "Answer Organizer" in c.messages[0].content][-1]
    finished(events)
    tm.check(events)
    assert [s.json["query"] for s in web.seen("/search")] == [q]
    assert web.seen("/search.json")[0].query["q"] == q and web.seen("/search.json")[0].query["gl"] == "us"
    assert web.seen("/v7.0/search")[0].query["cc"] == "CH"  # the template's Bing params, BING_API_KEY for the key
    assert web.seen("/html")[0].form["q"] == q and web.seen("/w/api.php")[0].query["gsrsearch"] == "Compost"
    results = {e.tool_name: e for e in of(events, ToolCallFinished, "Agent:WildGoatsRule")}
    assert all(r.error is None for r in results.values()), {n: r.error for n, r in results.items()}
    assert "Google's top result on" in results["google_search_2"].result
    assert "Bing's page on" in results["bing_search_3"].result
    assert "Privacy-first results on" in results["duckduckgo_search_4"].result
    assert "The encyclopedia article on Compost." in results["wikipedia_search_5"].result
    # The template's "Retrieval result" reads the web agent's answer again, not the Retrieval node (as shipped);
    # the dataset's chunk still reaches the references.
    assert "Web search result:\nWEB: " in organizer.messages[-1].content
    assert "Retrieval result:\nWEB: " in organizer.messages[-1].content
    [found] = of(events, NodeFinished, "Retrieval:WarmTimesRun")
    assert "thirty to one" in found.outputs["formalized_content"]
    assert answer(events, "Message:ShaggyRingsCrash") == "About 30:1 carbon to nitrogen."
    ref = reference(events)
    assert "composting.md" in ref["doc_aggs"]
    assert {"https://google.example/" + slug(q), "https://bing.example/" + slug(q), "https://ddg.example/" + slug(q),
            "https://wiki.example/compost"} <= {a.get("url") for a in ref["doc_aggs"].values()}


@pytest.mark.parametrize("mode", MODES)
async def test_stock_market_research_assistant_reads_the_balance_sheet_and_the_reports(web, kb, mode):
    scripts = {
        "web": {"rules": [
            *agent("identify and extract the stock name", "NVDA"),
            *agent("senior investment banking (IB) analyst", "ANALYSIS: strong balance sheet; {last_user}")]},
        "analyst": {"rules": [
            *agent("You are the information extraction agent", "EXTRACTED: {last_tool}",
                   ("Internal_Research_Report_Retrieval_Agent_0", order("find NVDA research reports"))),
            *agent("Retrieve the most relevant research reports", "REPORTS: {last_tool}", ("search_my_dateset_0", {"query": "NVDA data center revenue"}))]}}
    dsl = with_dataset(canvas("templates/stock_market_research_assistant.json"), kb.dataset_id)
    async with (template_models(mode, scripts, {"kimi-k2-turbo-preview@Moonshot": "analyst"}, default="web") as tm,
                sandbox_service() as sandbox):
        svc = Services(settings=allow_local(), llm=tm.llm.client, retrieval=kb.client, sandbox=sandbox)
        events = await run_for(tm.dsl(dsl), svc, "NVDA", kb.tenant)
    finished(events)
    tm.check(events)
    sheets = web.seen("/ws/fundamentals-timeseries/v1/finance/timeseries/NVDA")
    assert [s.query["type"].split(",")[0] for s in sheets] == ["annualTotalAssets", "quarterlyTotalAssets"]
    assert all(s.query["crumb"] == "crumb-1" for s in sheets)
    [code] = of(events, NodeFinished, "CodeExec:LightSheepTrade")
    table_ = code.outputs["md_table"]
    assert table_.startswith("| Indicator | 2025-01-31 |") and "| Total Assets (USD) | 111,601,000,000 |" in table_
    content = answer(events, "Message:OliveLawsArgue")
    assert content.startswith("Company financial statements:\n\n| Indicator | 2025-01-31 |")
    assert "ANALYSIS: strong balance sheet;" in content and "data center revenue" in content
    assert "nvda_report.md" in reference(events)["doc_aggs"]


async def test_deep_research_as_shipped_runs_on_the_default_model_with_the_fallback(web):
    """The template names qwen-max@Tongyi-Qianwen and three other factory models, none configured here:
    with TRELLIS_MODEL_FALLBACK each runs on the default chat model, and node_finished says so."""
    scripts = {"web": {"rules": [
        {"when": {"system_contains": "Strategy Research Director", "turn": 0}, "tool_calls": [
            {"name": "Web_Search_Specialist_0", "arguments": order("find sources on EV batteries")},
            {"name": "Content_Deep_Reader_1", "arguments": order("read https://web.example/ev-battery-market/1")}]},
        {"when": {"system_contains": "Strategy Research Director", "turn": 1}, "tool_calls": [
            {"name": "Research_Synthesizer_2", "arguments": order("write the report")}]},
        {"when": {"system_contains": "Strategy Research Director"}, "reply": "FINAL REPORT\n{last_tool}"},
        *agent("You are a Web Search Specialist", "URLs found: {last_tool}",
               ("tavily_search_0", {"query": "EV battery market"})),
        *agent("You are a Content Deep Reader", "Extracted: {last_tool}",
               ("tavily_extract_0", {"urls": ["https://web.example/ev-battery-market/1"]})),
        *agent("You are a Research Synthesizer", "Report: EV batteries are growing fast.")]}}
    models = dict.fromkeys(["qwen-max@Tongyi-Qianwen", "qwen-plus@Tongyi-Qianwen", "moonshot-v1-auto@Moonshot",
                            "moonshot-v1-128k@Moonshot"], "web")
    async with template_models("fallback", scripts, models) as tm:
        events = await run_canvas(canvas("templates/deep_research.json"), services(tm.llm, settings=allow_local()),
                                  query="EV battery market outlook")
    finished(events)
    tm.check(events)  # each of the four models: node_finished says it ran on the default
    assert [s.json["query"] for s in web.seen("/search")] == ["EV battery market"]
    assert answer(events, "Message:OrangeYearsShine") == "FINAL REPORT\nReport: EV batteries are growing fast."
    [lead] = of(events, NodeFinished, "Agent:NewPumasLick")
    assert "qwen-max@Tongyi-Qianwen" in lead.inputs["model_fallback"]
    assert urls(reference(events)) == {r["url"] for r in tavily_results("EV battery market")}
