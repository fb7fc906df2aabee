"""RAGFlow agent templates end to end through the engine: the real llm_gateway (scripted models) on port 0,
the real sandbox for code, and test doubles for the tools that would need the internet (Tavily).

Each runs with scripted models, and as shipped on a real-shaped provider and with the model fallback
(tests/support/template_models.py says how).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from services.orchestrator.components._fields import resolve_operand
from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.engine.events import (
    MessageDelta,
    NodeFinished,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from tests.support.canvas import of, registered, run_canvas, services
from tests.support.sandbox import sandbox_service
from tests.support.template_models import MODES, template_models

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"  # see NOTICE.md there
SEARCHED: list[str] = []


def template(name: str) -> dict[str, Any]:
    return json.loads((TEMPLATES / name).read_text(encoding="utf-8"))


class FakeTavilySearch(Component):
    """Stands in for TavilySearch (no internet in tests): two fixed results for any query."""

    component_name = "TavilySearch"

    async def run(self, ctx: NodeContext) -> None:
        query = str(await resolve_operand(ctx, self.params.given("query", "sys.query")))
        SEARCHED.append(query)
        results = [{"url": f"https://example.org/{i}", "title": f"{query} source {i}"} for i in (1, 2)]
        ctx.set_output("json", results)
        ctx.set_output("formalized_content", "\n".join(f"{r['title']}: {r['url']}" for r in results))


class FakeTavilyExtract(Component):
    component_name = "TavilyExtract"

    async def run(self, ctx: NodeContext) -> None:
        urls = self.params.given("urls") or []
        ctx.set_output("json", [{"url": u, "raw_content": f"content of {u}"} for u in urls])


@pytest.mark.parametrize("mode", MODES)
async def test_data_analysis_assistant_runs_the_models_code_in_the_sandbox(mode):
    code = ("import statistics\n"
            "def main():\n"
            "    sales = [120, 95, 143, 88, 170, 132]\n"
            "    print('rows:', len(sales))\n"
            "    return {'mean': round(statistics.mean(sales), 2), 'median': statistics.median(sales),\n"
            "            'stdev': round(statistics.stdev(sales), 3)}\n")
    scripts = {"analyst": [
        {"tool_calls": [{"name": "execute_code_0", "arguments": {"lang": "python", "script": code}}]},
        # paced: a model faster than the pipe arrives merged (services/common/coalesce.py)
        {"reply": "Here is the analysis: {last_tool}", "chunk_chars": 12, "chunk_delay_s": 0.1}]}
    dsl = template("data_analysis_beginner_assistant.json")
    async with template_models(mode, scripts, {"kimi-k2.5@Moonshot": "analyst"}) as tm, sandbox_service() as sandbox:
        events = await run_canvas(tm.dsl(dsl), services(tm.llm, sandbox), query="Analyse my monthly sales.")
        first, second = tm.calls_to("analyst")
    assert events[-1].error is None
    tm.check(events)
    [done] = of(events, ToolCallFinished, "Agent:SillyStatesRun")
    # Values only a real Python run can produce (statistics.stdev of the model's data).
    stdev = round(statistics.stdev([120, 95, 143, 88, 170, 132]), 3)
    assert f'"stdev": {stdev}' in done.result and '"median": 126.0' in done.result and "rows: 6" in done.result
    assert done.error is None and done.tool_name == "execute_code_0"
    assert [t.name for t in first.tools] == ["execute_code_0"]
    assert first.sampling.temperature == pytest.approx(0.2) and first.sampling.top_p == pytest.approx(0.75)
    assert second.tool_choice == "none"  # max_rounds 1: the second turn is the forced answer
    assert second.messages[-1].content.startswith("Exceed max rounds: 1.")
    text = "".join(d.content for d in of(events, MessageDelta, "Message:VastWaspsBrush"))
    assert text.startswith("Here is the analysis: {") and '"mean": 124.67' in text
    # Streamed, not one block. How many pieces arrive depends on how fast this machine takes them (a busy one
    # gets bigger merged pieces): 0.1 s between chunks leaves any machine time to send at least two.
    assert len(of(events, MessageDelta, "Message:VastWaspsBrush")) > 1


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # fallback: test_templates_web_e2e.py
async def test_deep_research_lead_runs_sub_agents_with_their_own_tools(mode):
    SEARCHED.clear()
    models = {"qwen-max@Tongyi-Qianwen": "lead", "qwen-plus@Tongyi-Qianwen": "searcher",
              "moonshot-v1-auto@Moonshot": "reader", "moonshot-v1-128k@Moonshot": "writer"}
    order = {"user_prompt": "find sources on {q}", "reasoning": "stage 1", "context": "none yet"}
    scripts = {
        "lead": [
            {"tool_calls": [
                {"name": "Web_Search_Specialist_0", "arguments": {**order, "user_prompt": "find sources on EV batteries"}},
                {"name": "Content_Deep_Reader_1", "arguments": {**order, "user_prompt": "read https://example.org/1"}}]},
            {"tool_calls": [{"name": "Research_Synthesizer_2", "arguments": {
                "user_prompt": "write the report", "reasoning": "stage 3", "context": "{last_tool}"}}]},
            "FINAL REPORT\n{last_tool}"],
        "searcher": [{"tool_calls": [{"name": "tavily_search_0", "arguments": {"query": "EV battery market"}}]},
                     "URLs found: {last_tool}"],
        "reader": [{"tool_calls": [{"name": "tavily_extract_0", "arguments": {"urls": ["https://example.org/1"]}}]},
                   "Extracted: {last_tool}"],
        "writer": ["Report: EV batteries are growing fast."],
    }
    dsl = template("deep_research.json")
    with registered(FakeTavilySearch, FakeTavilyExtract):
        async with template_models(mode, scripts, models) as tm:
            events = await run_canvas(tm.dsl(dsl), services(tm.llm), query="EV battery market outlook")
            lead_calls = tm.calls_to("lead")
            searcher_first = tm.calls_to("searcher")[0]
    assert events[-1].error is None, events[-1].error
    tm.check(events)
    lead = "Agent:NewPumasLick"
    assert [e.tool_name for e in of(events, ToolCallStarted, lead)] == [
        "Web_Search_Specialist_0", "Content_Deep_Reader_1", "Research_Synthesizer_2"]
    nested = {e.node_id: e.tool_name for e in of(events, ToolCallStarted) if e.node_id != lead}
    assert nested == {f"{lead}-->Web_Search_Specialist": "tavily_search_0",
                      f"{lead}-->Content_Deep_Reader": "tavily_extract_0"}
    assert SEARCHED == ["EV battery market"]  # the model's query, not the template's sys.query default
    assert [t.name for t in lead_calls[0].tools] == ["Web_Search_Specialist_0", "Content_Deep_Reader_1",
                                                     "Research_Synthesizer_2"]
    observed = {m.content for m in lead_calls[1].messages if m.role == "tool"}
    assert any(o.startswith("URLs found: EV battery market source 1") for o in observed)
    assert any("content of https://example.org/1" in o for o in observed)
    assert "QUERY:\nfind sources on EV batteries" in searcher_first.messages[-1].content
    assert searcher_first.messages[0].content.startswith("You are a Web Search Specialist")
    [msg] = of(events, NodeFinished, "Message:OrangeYearsShine")
    assert msg.outputs["content"] == "FINAL REPORT\nReport: EV batteries are growing fast."
    assert isinstance(events[-1], RunFinished) and events[-1].usage["calls"] == 3 + 2 + 2 + 1


@pytest.mark.parametrize("mode", ["scripted", "provider"])  # llm_id "": the default model, no fallback to make
@pytest.mark.parametrize("review, path, category", [
    ("The parcel came three weeks late and nobody could tell me where it was.",
     ["Categorize:RottenWallsObey", "Categorize:FourTeamsFold", "VariableAggregator:FlatBerriesRest",
      "Message:LongSquidsShare"], "Transportation issue"),
    ("I love it, it makes my work easier.", ["Categorize:RottenWallsObey", "Message:SevenPlanetsPeel"],
     "Positive review"),
], ids=["negative-transport", "positive"])
async def test_customer_feedback_dispatcher_routes_through_two_categorizes(review, path, category, mode):
    scripts = {"classifier": {"rules": [
        {"when": {"system_contains": "Transportation issue", "contains": "late"}, "reply": "Transportation issue"},
        {"when": {"system_contains": "Transportation issue"}, "reply": "After-sales issues"},
        {"when": {"contains": "late"}, "reply": "Negative review"},
        {"reply": "Positive review"}]}}
    dsl = template("customer_feedback_dispatcher.json")
    async with template_models(mode, scripts, default="classifier") as tm:  # the template's llm_id is ""
        events = await run_canvas(tm.dsl(dsl), services(tm.llm),
                                  inputs={"customer_review": {"type": "line", "value": review}})
    assert events[-1].error is None
    tm.check(events)
    ran = [e.node_id for e in of(events, NodeFinished) if not e.skipped and e.node_id != "begin"]
    assert ran == path
    final = of(events, NodeFinished, path[-1])[0].outputs["content"]
    assert final.startswith(f"Customer's original review: {review}") and final.rstrip().endswith(category)


@pytest.mark.parametrize("mode", MODES)
async def test_photo_text_translator_answers_with_the_models_translation(mode):
    scripts = {"translator": ["**Detected (French):** Sortie\n**Translation:** Exit"]}
    dsl = template("photo_text_translator.json")
    async with template_models(mode, scripts, {"qwen-vl-plus@Tongyi-Qianwen": "translator"}) as tm:
        events = await run_canvas(tm.dsl(dsl), services(tm.llm), query="The sign says: Sortie")
        [call] = tm.calls_to("translator")
    assert events[-1].error is None, events[-1].error
    tm.check(events)
    [msg] = of(events, NodeFinished, "Message:CurlyApplesRelate")
    assert msg.outputs["content"] == "**Detected (French):** Sortie\n**Translation:** Exit"
    assert call.messages[0].content.startswith("You are a multilingual translation assistant that works from images.")
    assert call.messages[-1].content.startswith("The user query is The sign says: Sortie")
