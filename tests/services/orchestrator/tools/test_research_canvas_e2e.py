"""A RAGFlow-shaped canvas end to end with these tools: an Agent (scripted model in a real llm_gateway)
searches ArXiv and PubMed (local servers in their APIs' shapes), answers citing them, and an Email node
sends the answer through a real SMTP server. The run finishes without error, the model saw both tools'
results, and `message_end` carries the papers as references."""
from __future__ import annotations

import pytest

from services.orchestrator.engine.events import MessageEnd, NodeFinished, RunFinished, ToolCallFinished
from tests.support.canvas import cpn, of, run_canvas, services
from tests.support.fake_web_api import Respond, allow_local
from tests.support.llm_gateway import llm_gateway
from tests.support.paper_apis import EFETCH, ESEARCH, FEED
from tests.support.smtp_server import EMAIL_PARAMS

SCRIPTS = {"chat": {"researcher": [
    {"tool_calls": [{"name": "arxiv_search_0", "arguments": {"query": "retrieval augmented generation"}},
                    {"name": "pubmed_search_1", "arguments": {"query": "crispr"}}]},
    "Two findings [ID:0] [ID:1]."]}}


@pytest.fixture
def papers(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_ARXIV_BASE_URL", web_api.url)
    monkeypatch.setenv("TRELLIS_PUBMED_BASE_URL", web_api.url)
    web_api.route("GET", "/api/query", Respond(200, FEED, "application/atom+xml"))
    web_api.route("GET", "/entrez/eutils/esearch.fcgi", Respond(200, ESEARCH, "text/xml"))
    web_api.route("GET", "/entrez/eutils/efetch.fcgi", Respond(200, EFETCH, "text/xml"))
    return web_api


async def test_an_agent_researches_with_arxiv_and_pubmed_and_mails_the_answer(papers, smtp):
    tools = [{"component_name": "ArXiv", "name": "ArXiv", "params": {"top_n": 3}},
             {"component_name": "PubMed", "name": "PubMed", "params": {"top_n": 2}}]
    email = {**EMAIL_PARAMS, "smtp_port": smtp.port, "to_email": "ann@x.example", "subject": "Research digest",
             "content": "{Agent:research@content}"}
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:research"]),
        "Agent:research": cpn("Agent", ["Email:send"], {"llm_id": "researcher@Scripted", "sys_prompt": "Research.",
                                                        "tools": tools}, ["begin"]),
        "Email:send": cpn("Email", ["Message:done"], email, ["Agent:research"]),
        "Message:done": cpn("Message", [], {"content": ["{Agent:research@content}"]}, ["Email:send"]),
    }}
    async with llm_gateway(SCRIPTS) as llm:
        events = await run_canvas(dsl, services(llm, settings=allow_local()), query="what is new?")
        second = llm.calls_to("researcher")[1]
    assert isinstance(events[-1], RunFinished) and events[-1].error is None, events[-1].error
    calls = of(events, ToolCallFinished, "Agent:research")
    assert sorted(c.tool_name for c in calls) == ["arxiv_search_0", "pubmed_search_1"] and all(c.error is None for c in calls)
    observed = "\n".join(m.content for m in second.messages if m.role == "tool")
    assert "We study retrieval for large models." in observed and "Authors: Jennifer Doudna" in observed
    [sent] = of(events, NodeFinished, "Email:send")
    assert sent.outputs["success"] is True
    [(_, rcpts, msg)] = smtp.messages
    assert rcpts == ["ann@x.example"]
    assert msg.get_payload()[0].get_payload(decode=True).decode() == "Two findings [ID:0] [ID:1]."
    [end] = [e for e in of(events, MessageEnd) if e.reference]
    assert {c["url"] for c in end.reference["chunks"].values()} == {
        "http://arxiv.org/pdf/2401.00001v1", "https://pubmed.ncbi.nlm.nih.gov/38000001",
        "https://pubmed.ncbi.nlm.nih.gov/38000002"}
