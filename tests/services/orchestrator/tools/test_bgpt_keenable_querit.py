"""BGPT, KeenableSearch, QueritSearch and QueritContents against local servers speaking their APIs.
Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import json

import pytest

from services.orchestrator.components import get_class
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

PAPER = {"title": "Statins and dementia", "doi": "10.1/x", "url": None, "authors": ["A. Smith"], "year": 2024,
         "journal": "BMJ", "abstract": "Cohort study.", "methods": "Cohort", "sample_size_and_population": "n=12000",
         "results_and_conclusions": "HR 0.8", "limitations": "", "study_blindspots": "adherence"}


@pytest.fixture
def api(web_api, monkeypatch):
    for service in ("BGPT", "KEENABLE", "QUERIT"):
        monkeypatch.setenv(f"TRELLIS_{service}_BASE_URL", web_api.url)
        monkeypatch.delenv(f"{service}_API_KEY", raising=False)
    return web_api


async def test_bgpt_posts_the_query_and_the_model_sees_the_evidence_fields(api):
    api.route("POST", "/api/mcp-search", {"results": [PAPER], "total": 1})
    observation, error, ctx = await agent_call("BGPT", {"top_n": 3, "api_key": "bg-1", "days_back": "30"},
                                               {"query": " statins dementia "})
    assert error is None
    assert api.seen("/api/mcp-search")[0].json == {"query": "statins dementia", "num_results": 3, "api_key": "bg-1",
                                                   "days_back": 30}
    assert ("Title: Statins and dementia\nAuthors: ['A. Smith']\nJournal: BMJ\nYear: 2024\nDOI: 10.1/x\n"
            "Abstract: Cohort study.\nMethods: Cohort\nSample size / population: n=12000\nResults: HR 0.8\n"
            "Limitations: -\nConflicts of interest: -\nData availability: -\nBlind spots: adherence\n"
            "How to falsify: -") in observation
    assert references(ctx)["doc_aggs"]["Statins and dementia"]["url"] == "10.1/x"  # no url: the DOI


async def test_bgpt_without_a_key_sends_none(api):
    api.route("POST", "/api/mcp-search", {"results": []})
    observation, error, _ = await agent_call("BGPT", {}, {"query": "q"})
    assert error is None and observation == "" and api.seen()[0].json == {"query": "q", "num_results": 10}


def test_bgpt_validation_names_a_bad_days_back():
    issues = get_class("BGPT").check("BGPT:x", {"days_back": "soon"})
    assert [i.field for i in issues] == ["params.days_back"]
    assert get_class("BGPT").check("BGPT:x", {"days_back": 7}) == []


async def test_keenable_uses_the_public_endpoint_without_a_key(api):
    api.route("POST", "/v1/search/public", {"results": [
        {"title": "T1", "url": "https://a.example", "snippet": "line one\n  line two", "description": ""},
        {"title": "T2", "url": "https://b.example", "snippet": "", "description": "desc two"},
        {"title": "T3", "url": "https://c.example", "snippet": "three"}]})
    observation, error, _ = await agent_call("KeenableSearch", {"top_n": 2}, {"query": "ai news", "site": "a.example"})
    assert error is None
    [seen] = api.seen("/v1/search/public")
    assert seen.json == {"query": "ai news", "mode": "pro", "site": "a.example"}
    assert seen.headers["X-Keenable-Title"] == "RAGFlow" and "X-API-Key" not in seen.headers
    assert "Content:\nline one line two" in observation and "Content:\ndesc two" in observation
    assert "three" not in observation


async def test_keenable_with_a_key_uses_the_keyed_endpoint_and_realtime_needs_one(api, monkeypatch):
    api.route("POST", "/v1/search", {"results": []})
    observation, error, _ = await agent_call("KeenableSearch", {"mode": "realtime"}, {"query": "q"})
    assert observation.startswith("Error: ") and "requires an API key" in error and api.seen() == []
    monkeypatch.setenv("KEENABLE_API_KEY", "kn-env")
    _, error, _ = await agent_call("KeenableSearch", {"mode": "realtime"}, {"query": "q"})
    [seen] = api.seen("/v1/search")
    assert error is None and seen.headers["X-API-Key"] == "kn-env" and seen.json["mode"] == "realtime"


async def test_querit_search_builds_ragflows_payload_and_json_is_the_whole_answer(api):
    answer = {"took": "12ms", "results": {"result": [
        {"title": "Querit doc", "url": "https://q.example/1", "snippet": "The snippet."}, "junk"]}}
    api.route("POST", "/v1/search", answer)
    observation, error, ctx = await agent_call(
        "QueritSearch", {"api_key": "qk", "site_exclude": ["spam.example"]},
        {"query": "llm", "count": "5", "site_include": ["q.example"], "time_range": "w1", "language_include": ["en"]})
    assert error is None
    [seen] = api.seen("/v1/search")
    assert seen.headers["Authorization"] == "Bearer qk"
    assert seen.json == {"query": "llm", "count": 5, "chunksPerDoc": 3,
                         "filters": {"sites": {"include": ["q.example"], "exclude": ["spam.example"]},
                                     "timeRange": {"date": "w1"}, "languages": {"include": ["en"]}}}
    assert "├── Title: Querit doc\n├── URL: https://q.example/1\n└── Content:\nThe snippet." in observation
    [chunk] = references(ctx)["chunks"].values()
    assert chunk["similarity"] == 1


async def test_querit_search_checks_arguments_as_ragflow_does(api):
    observation, error, _ = await agent_call("QueritSearch", {"api_key": "qk"}, {"query": "q", "time_range": "lastweek"})
    assert observation.startswith("Error: ") and "time_range" in error and api.seen() == []
    _, error, _ = await agent_call("QueritSearch", {"api_key": "qk"}, {"query": "q", "chunks_per_doc": 4})
    assert "chunks_per_doc must be an integer from 1 to 3" in error
    _, error, _ = await agent_call("QueritSearch", {}, {"query": "q"})
    assert "QUERIT_API_KEY" in error


async def test_querit_contents_posts_the_urls_and_the_model_sees_the_answer(api, monkeypatch):
    monkeypatch.setenv("QUERIT_API_KEY", "qk-env")
    answer = {"results": [{"url": "https://a.example", "content": "# A"}], "statuses": [{"url": "https://a.example",
                                                                                         "status": "success"}]}
    api.route("POST", "/v1/contents", answer)
    ctx = await node_run("QueritContents", {"urls": "https://a.example, https://b.example", "format": "text"})
    [seen] = api.seen("/v1/contents")
    assert seen.json == {"urls": ["https://a.example", "https://b.example"], "format": "text", "crawlTimeout": 10,
                         "extrasMeta": False}
    assert ctx.outputs["json"] == answer
    observation, error, _ = await agent_call("QueritContents", {}, {"urls": ["ftp://a.example"]})
    assert "absolute HTTP or HTTPS" in error
    observation, error, _ = await agent_call("QueritContents", {}, {"urls": ["https://a.example"]})
    assert error is None and json.loads(observation) == answer


def test_the_model_is_offered_ragflows_functions():
    assert tool_schema("BGPT").name == "bgpt_search_0"
    assert set(tool_schema("KeenableSearch").parameters["properties"]) == {"query", "site"}
    search = tool_schema("QueritSearch")
    assert search.name == "querit_search_0" and search.parameters["properties"]["count"]["type"] == "integer"
    contents = tool_schema("QueritContents")
    assert contents.parameters["required"] == ["urls"] and contents.parameters["properties"]["format"]["enum"] == [
        "text", "markdown", "html"]
