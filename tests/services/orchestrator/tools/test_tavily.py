"""TavilySearch and TavilyExtract against a local server speaking Tavily's API (POST /search, /extract)."""
from __future__ import annotations

import json

import pytest

from services.orchestrator.components import get_class
from services.orchestrator.components.retrieval import hash_str2int
from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

RESULTS = [
    {"title": "Solid-state batteries in 2026", "url": "https://news.example.com/ssb", "score": 0.91,
     "content": "Solid-state cells reach 400 Wh/kg in pilot lines.", "raw_content": None},
    {"title": "Lithium prices", "url": "https://markets.example.com/li", "score": 0.55,
     "content": "Lithium carbonate fell 12% this quarter.", "raw_content": None},
]


def search_answer(seen):
    return {"query": seen.json["query"], "follow_up_questions": None, "answer": None, "images": [],
            "results": RESULTS, "response_time": 0.42}


@pytest.fixture
def tavily(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_TAVILY_BASE_URL", web_api.url)
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    return web_api


async def test_search_sends_ragflows_request_and_the_model_sees_citable_results(tavily):
    tavily.route("POST", "/search", search_answer)
    observation, error, ctx = await agent_call("TavilySearch", {"api_key": "tvly-k1"},
                                               {"query": "solid state battery", "topic": "news"})
    assert error is None
    [seen] = tavily.seen("/search")
    assert seen.headers["Authorization"] == "Bearer tvly-k1"
    assert seen.json == {"query": "solid state battery", "search_depth": "basic", "topic": "news", "max_results": 6,
                         "days": 14, "include_answer": False, "include_image_descriptions": False,
                         "include_domains": [], "exclude_domains": [], "include_images": False,
                         "include_raw_content": False}
    first_id = hash_str2int(str(hash_str2int(RESULTS[0]["content"])))
    assert f"ID: {first_id}\n├── Title: Solid-state batteries in 2026\n├── URL: https://news.example.com/ssb" \
           f"\n└── Content:\nSolid-state cells reach 400 Wh/kg" in observation
    assert "Lithium carbonate fell 12%" in observation
    ref = references(ctx)
    chunk = ref["chunks"][str(first_id)]
    assert chunk["url"] == "https://news.example.com/ssb" and chunk["document_name"] == RESULTS[0]["title"]
    assert chunk["similarity"] == RESULTS[0]["score"]
    assert ref["doc_aggs"]["Lithium prices"]["url"] == "https://markets.example.com/li"


def test_the_model_is_offered_ragflows_function():
    schema = tool_schema("TavilySearch")
    assert schema.name == "tavily_search_0"
    assert schema.description.startswith("Tavily is a search engine optimized for LLMs")
    assert set(schema.parameters["properties"]) == {"query", "topic", "include_domains", "exclude_domains"}
    assert schema.parameters["required"] == ["query"]
    assert schema.parameters["properties"]["topic"]["enum"] == ["general", "news"]
    extract = tool_schema("TavilyExtract")
    assert extract.name == "tavily_extract_0" and extract.parameters["required"] == ["urls"]


async def test_as_a_canvas_node_it_searches_the_referenced_query_with_the_dsl_params(tavily):
    tavily.route("POST", "/search", search_answer)
    params = {"api_key": "tvly-k2", "query": "sys.query", "max_results": 5, "search_depth": "advanced",
              "include_raw_content": True}
    ctx = await node_run("TavilySearch", params, query="EV battery outlook")
    [seen] = tavily.seen("/search")
    assert seen.json["query"] == "EV battery outlook" and seen.json["max_results"] == 5
    assert seen.json["search_depth"] == "advanced" and seen.json["include_raw_content"] is False
    assert ctx.outputs["json"] == RESULTS
    assert "Solid-state cells" in ctx.outputs["formalized_content"]
    assert ctx.inputs["query"] == "EV battery outlook"


async def test_the_key_comes_from_the_environment_when_params_have_none(tavily, monkeypatch):
    tavily.route("POST", "/search", search_answer)
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-env")
    _, error, _ = await agent_call("TavilySearch", {"api_key": ""}, {"query": "q"})
    assert error is None and tavily.seen()[0].headers["Authorization"] == "Bearer tvly-env"


async def test_no_key_anywhere_is_an_observation_naming_both_places(tavily):
    observation, error, _ = await agent_call("TavilySearch", {}, {"query": "q"})
    assert observation.startswith("Error: ") and "api_key" in error and "TAVILY_API_KEY" in error
    assert tavily.seen() == []


async def test_an_api_error_reaches_the_model_as_an_observation(tavily):
    tavily.route("POST", "/search", Respond(401, json.dumps({"detail": {"error": "Unauthorized: missing or invalid API key."}})))
    observation, error, _ = await agent_call("TavilySearch", {"api_key": "bad"}, {"query": "q"})
    assert observation.startswith("Error: Agent:a-->TavilySearch: TavilySearch answered HTTP 401")
    assert "HTTP 401" in error and "invalid API key" in error
    assert len(tavily.seen()) == 1  # a 401 is not retried


async def test_a_busy_service_is_retried(tavily):
    tavily.route("POST", "/search", Respond(503, "busy", "text/plain", {"Retry-After": "0"}), search_answer)
    observation, error, _ = await agent_call("TavilySearch", {"api_key": "k"}, {"query": "q"})
    assert error is None and "Solid-state" in observation
    assert len(tavily.seen("/search")) == 2


async def test_a_slow_service_times_out_into_an_observation(tavily, monkeypatch):
    monkeypatch.setenv("TRELLIS_TAVILY_TIMEOUT_S", "0.2")
    tavily.route("POST", "/search", search_answer, delay=30)
    observation, error, _ = await agent_call("TavilySearch", {"api_key": "k"}, {"query": "q"})
    assert observation.startswith("Error: ") and "did not answer within 0.2 s" in error


async def test_a_private_address_is_refused_unless_allowed(tavily):
    tavily.route("POST", "/search", search_answer)
    observation, error, _ = await agent_call("TavilySearch", {"api_key": "k"}, {"query": "q"}, allow=False)
    assert observation.startswith("Error: ") and "TRELLIS_TAVILY_BASE_URL" in error and "loopback" in error
    assert tavily.seen() == []
    _, error, _ = await agent_call("TavilySearch", {"api_key": "k"}, {"query": "q"}, allow=True)
    assert error is None and len(tavily.seen()) == 1


async def test_extract_sends_the_urls_and_the_model_sees_the_page_text(tavily):
    tavily.route("POST", "/extract", lambda seen: {
        "results": [{"url": u, "raw_content": f"# Page\nText of {u}", "images": []} for u in seen.json["urls"]],
        "failed_results": [], "response_time": 0.3})
    observation, error, _ = await agent_call("TavilyExtract", {"api_key": "k"},
                                             {"urls": "https://a.example/x, https://b.example/y"})
    assert error is None
    [seen] = tavily.seen("/extract")
    assert seen.json == {"urls": ["https://a.example/x", "https://b.example/y"], "extract_depth": "basic",
                         "format": "markdown", "include_images": False}
    assert json.loads(observation)[1] == {"url": "https://b.example/y", "raw_content": "# Page\nText of https://b.example/y",
                                          "images": []}


async def test_extract_without_urls_is_an_error_naming_the_argument(tavily):
    observation, error, _ = await agent_call("TavilyExtract", {"api_key": "k"}, {"urls": []})
    assert observation.startswith("Error: ") and "urls" in error and tavily.seen() == []


def test_validation_names_a_bad_param():
    issues = get_class("TavilySearch").check("TavilySearch:x", {"topic": "sports", "max_results": 0})
    assert {(i.field) for i in issues} == {"params.topic", "params.max_results"}
    assert get_class("TavilyExtract").check("TavilyExtract:x", {"api_key": ""}) == []


async def test_a_service_that_refuses_connections_is_an_observation(monkeypatch):
    from tests.support.net import free_port

    monkeypatch.setenv("TRELLIS_TAVILY_BASE_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    observation, error, _ = await agent_call("TavilySearch", {"api_key": "k"}, {"query": "q"})
    assert observation.startswith("Error: ") and "TavilySearch: POST http://127.0.0.1:" in error and "failed" in error


def test_thoughts_name_the_query_before_and_after_the_run():
    from tests.support.tool_calls import context

    ctx = context(query="battery prices")
    tool = get_class("TavilySearch")("TavilySearch:t", {"query": "sys.query"})
    assert "Keywords: battery prices" in tool.thoughts(ctx)
    ctx.set_input("query", "lithium")
    assert "Keywords: lithium" in tool.thoughts(ctx)
