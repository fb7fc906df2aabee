"""Google (SerpApi's /search.json) and Bing (Bing Search v7) against local servers speaking their APIs."""
from __future__ import annotations

import pytest

from services.orchestrator.components import get_class
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

ORGANIC = [
    {"position": 1, "title": "Mount Everest - Wikipedia", "link": "https://en.wikipedia.org/wiki/Mount_Everest",
     "snippet": "Mount Everest is Earth's highest mountain above sea level."},
    {"position": 2, "title": "Everest facts", "link": "https://facts.example.com/everest",
     "snippet": "short snippet",
     "about_this_result": {"source": {"description": "A site of facts about mountains, 8,849 m."}}},
]


@pytest.fixture
def serpapi(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_SERPAPI_BASE_URL", web_api.url)
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    return web_api


@pytest.fixture
def bing(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_BING_BASE_URL", web_api.url)
    monkeypatch.delenv("BING_API_KEY", raising=False)
    return web_api


async def test_google_sends_serpapis_query_and_the_model_sees_the_organic_results(serpapi):
    serpapi.route("GET", "/search.json", {"search_metadata": {"status": "Success"}, "organic_results": ORGANIC})
    observation, error, ctx = await agent_call("Google", {"api_key": "serp-1", "country": "us", "language": "en"},
                                               {"q": "highest mountain", "num": 2})
    assert error is None
    [seen] = serpapi.seen("/search.json")
    assert dict(seen.query) == {"engine": "google", "q": "highest mountain", "google_domain": "google.com",
                                "gl": "us", "hl": "en", "start": "0", "num": "2", "api_key": "serp-1"}
    assert "├── URL: https://en.wikipedia.org/wiki/Mount_Everest" in observation
    assert "Earth's highest mountain" in observation
    assert "A site of facts about mountains" in observation and "short snippet" not in observation
    assert {c["url"] for c in references(ctx)["chunks"].values()} == {o["link"] for o in ORGANIC}
    assert tool_schema("Google").parameters["required"] == ["q"]


async def test_google_reports_serpapis_error_field(serpapi, monkeypatch):
    monkeypatch.setenv("SERPAPI_API_KEY", "from-env")
    serpapi.route("GET", "/search.json", {"error": "Your account has run out of searches."})
    observation, error, _ = await agent_call("Google", {"api_key": ""}, {"q": "x"})
    assert observation.startswith("Error: ") and "run out of searches" in error
    assert serpapi.seen()[0].query["api_key"] == "from-env"


async def test_google_as_a_node_searches_the_query(serpapi):
    serpapi.route("GET", "/search.json", {"organic_results": ORGANIC[:1]})
    ctx = await node_run("Google", {"api_key": "k", "q": "sys.query"}, query="everest height")
    assert serpapi.seen()[0].query["q"] == "everest height"
    assert ctx.outputs["json"] == ORGANIC[:1] and "Mount Everest" in ctx.outputs["formalized_content"]


async def test_bing_sends_the_key_header_and_the_model_sees_web_pages(bing):
    bing.route("GET", "/v7.0/search", {"_type": "SearchResponse", "webPages": {"value": [
        {"name": "The <b>Rhine</b> river", "url": "https://rivers.example/rhine", "snippet": "The <b>Rhine</b> flows 1,230 km."}]}})
    params = {"api_key": "YOUR_API_KEY (obtained from https://www.microsoft.com/en-us/bing/apis/bing-web-search-api)",
              "channel": "Webpages", "country": "CH", "language": "en", "top_n": 10}
    observation, error, _ = await agent_call("Bing", {**params, "api_key": "bing-1"}, {"query": "rhine length"})
    assert error is None
    [seen] = bing.seen("/v7.0/search")
    assert seen.headers["Ocp-Apim-Subscription-Key"] == "bing-1" and seen.headers["Accept-Language"] == "en"
    assert seen.query["q"] == "rhine length" and seen.query["cc"] == "CH" and seen.query["count"] == "10"
    assert "├── Title: The Rhine river" in observation and "The Rhine flows 1,230 km." in observation
    # The template's placeholder key is not a key: without BING_API_KEY the model is told where to set one.
    observation, error, _ = await agent_call("Bing", params, {"query": "rhine"})
    assert observation.startswith("Error: ") and "BING_API_KEY" in error


async def test_bing_news_channel(bing):
    bing.route("GET", "/v7.0/news/search", {"news": {"value": [
        {"name": "Floods", "url": "https://news.example/floods", "description": "Rhine floods in Basel."}]}})
    ctx = await node_run("Bing", {"api_key": "k", "channel": "News", "query": "sys.query"}, query="rhine news")
    assert bing.seen()[0].path == "/v7.0/news/search" and bing.seen()[0].query["promote"] == "News"
    assert "Rhine floods in Basel." in ctx.outputs["formalized_content"]


def test_bing_validation_names_the_channel():
    [issue] = get_class("Bing").check("Bing:x", {"channel": "Images"})
    assert issue.field == "params.channel"
