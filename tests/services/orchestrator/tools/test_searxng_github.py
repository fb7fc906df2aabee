"""SearXNG and GitHub against local servers speaking their APIs (SearXNG's /search?format=json, GitHub's
/search/repositories). Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import pytest

from tests.support.tool_calls import agent_call, node_run, references, tool_schema

SEARX_RESULTS = [{"title": f"Result {i}", "url": f"https://site{i}.example/page", "content": f"Snippet number {i}.",
                  "engine": "duckduckgo", "score": 1.0 / (i + 1)} for i in range(12)]
REPOS = [{"name": "ragflow", "full_name": "infiniflow/ragflow", "html_url": "https://github.com/infiniflow/ragflow",
          "description": "RAG engine", "watchers": 70000, "stargazers_count": 70000},
         {"name": "tiny-rag", "full_name": "x/tiny-rag", "html_url": "https://github.com/x/tiny-rag",
          "description": None, "watchers": 12, "stargazers_count": 12}]


@pytest.fixture
def searx(web_api, monkeypatch):
    monkeypatch.delenv("TRELLIS_SEARXNG_BASE_URL", raising=False)
    web_api.route("GET", "/search", lambda seen: {"query": seen.query["q"], "number_of_results": 12,
                                                  "results": SEARX_RESULTS, "answers": [], "suggestions": []})
    return web_api


async def test_searxng_queries_the_configured_instance_and_the_model_sees_top_n_results(searx):
    observation, error, ctx = await agent_call("SearXNG", {"searxng_url": searx.url + "/", "top_n": 3},
                                               {"query": "open source search"})
    assert error is None
    [seen] = searx.seen("/search")
    assert dict(seen.query) == {"q": "open source search", "format": "json", "categories": "general",
                                "language": "auto", "safesearch": "1", "pageno": "1"}
    assert "├── Title: Result 0\n├── URL: https://site0.example/page\n└── Content:\nSnippet number 0." in observation
    assert "Result 2" in observation and "Result 3" not in observation
    assert {a["url"] for a in references(ctx)["doc_aggs"].values()} == {f"https://site{i}.example/page" for i in range(3)}


async def test_searxng_as_a_node_uses_the_environments_instance_when_params_have_none(searx, monkeypatch):
    monkeypatch.setenv("TRELLIS_SEARXNG_BASE_URL", searx.url)
    ctx = await node_run("SearXNG", {"query": "sys.query"}, query="privacy")
    assert searx.seen()[0].query["q"] == "privacy"
    assert ctx.outputs["json"] == SEARX_RESULTS[:10]


async def test_searxng_without_an_instance_names_both_places(searx):
    observation, error, _ = await agent_call("SearXNG", {}, {"query": "q"})
    assert observation.startswith("Error: ") and "searxng_url" in error and "TRELLIS_SEARXNG_BASE_URL" in error


def test_searxng_and_github_offer_ragflows_functions():
    searx = tool_schema("SearXNG")
    assert searx.name == "searxng_search_0" and set(searx.parameters["properties"]) == {"query", "searxng_url"}
    assert searx.description.startswith("SearXNG is a privacy-focused metasearch engine")
    github = tool_schema("GitHub")
    assert github.name == "github_search_0" and github.parameters["required"] == ["query"]


@pytest.fixture
def github(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_GITHUB_BASE_URL", web_api.url)
    monkeypatch.delenv("GITHUB_API_KEY", raising=False)
    web_api.route("GET", "/search/repositories", {"total_count": 2, "incomplete_results": False, "items": REPOS})
    return web_api


async def test_github_searches_by_stars_and_the_model_sees_description_and_stars(github):
    observation, error, ctx = await agent_call("GitHub", {"top_n": 5}, {"query": "rag engine"})
    assert error is None
    [seen] = github.seen("/search/repositories")
    assert dict(seen.query) == {"q": "rag engine", "sort": "stars", "order": "desc", "per_page": "5"}
    assert seen.headers["X-GitHub-Api-Version"] == "2022-11-28" and "Authorization" not in seen.headers
    assert "├── Title: ragflow\n├── URL: https://github.com/infiniflow/ragflow\n└── Content:\nRAG engine\n stars:70000" \
           in observation
    assert "None\n stars:12" in observation  # RAGFlow's str(description)
    assert references(ctx)["doc_aggs"]["tiny-rag"]["url"] == "https://github.com/x/tiny-rag"


async def test_github_sends_a_token_from_the_environment(github, monkeypatch):
    monkeypatch.setenv("GITHUB_API_KEY", "ghp_env")
    await agent_call("GitHub", {}, {"query": "q"})
    assert github.seen()[0].headers["Authorization"] == "Bearer ghp_env"


async def test_github_reports_its_message_when_there_are_no_items(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_GITHUB_BASE_URL", web_api.url)
    web_api.route("GET", "/search/repositories", {"message": "Validation Failed", "errors": []})
    observation, error, _ = await agent_call("GitHub", {}, {"query": "q"})
    assert observation.startswith("Error: ") and "Validation Failed" in error
