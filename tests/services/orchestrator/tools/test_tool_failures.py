"""Every web tool, failing: an API error, a slow service, a private address. The run goes on; the model
sees "Error: ..." naming the tool and the cause."""
from __future__ import annotations

import pytest

from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call

# component_name -> (env prefix, the route its first request takes, DSL params, the model's arguments)
TOOLS = {
    "TavilySearch": ("TAVILY", ("POST", "/search"), {"api_key": "k"}, {"query": "q"}),
    "TavilyExtract": ("TAVILY", ("POST", "/extract"), {"api_key": "k"}, {"urls": ["https://a.example"]}),
    "Google": ("SERPAPI", ("GET", "/search.json"), {"api_key": "k"}, {"q": "q"}),
    "Bing": ("BING", ("GET", "/v7.0/search"), {"api_key": "k"}, {"query": "q"}),
    "DuckDuckGo": ("DUCKDUCKGO", ("POST", "/html"), {}, {"query": "q"}),
    "Wikipedia": ("WIKIPEDIA", ("GET", "/w/api.php"), {}, {"query": "q"}),
    "YahooFinance": ("YAHOOFINANCE", ("GET", "/v1/test/getcrumb"), {}, {"stock_code": "NVDA"}),
    "SearXNG": ("SEARXNG", ("GET", "/search"), {}, {"query": "q"}),
    "GitHub": ("GITHUB", ("GET", "/search/repositories"), {}, {"query": "q"}),
    "ArXiv": ("ARXIV", ("GET", "/api/query"), {}, {"query": "q"}),
    "PubMed": ("PUBMED", ("GET", "/entrez/eutils/esearch.fcgi"), {}, {"query": "q"}),
    "BGPT": ("BGPT", ("POST", "/api/mcp-search"), {}, {"query": "q"}),
    "KeenableSearch": ("KEENABLE", ("POST", "/v1/search/public"), {}, {"query": "q"}),
    "QueritSearch": ("QUERIT", ("POST", "/v1/search"), {"api_key": "k"}, {"query": "q"}),
    "QueritContents": ("QUERIT", ("POST", "/v1/contents"), {"api_key": "k"}, {"urls": ["https://a.example"]}),
    "DeepL": ("DEEPL", ("POST", "/v2/translate"), {"auth_key": "k"}, {"query": "q"}),
    "QWeather": ("QWEATHER", ("GET", "/v2/city/lookup"), {"web_apikey": "k"}, {"query": "q"}),
    "GoogleScholar": ("GOOGLESCHOLAR", ("GET", "/scholar"), {}, {"query": "q"}),
    "AkShare": ("AKSHARE", ("GET", "/search/jsonp"), {}, {"query": "600519"}),
    "TuShare": ("TUSHARE", ("POST", "/"), {"token": "k"}, {"keyword": "q"}),
    "Jin10": ("JIN10", ("GET", "/data-api/flash"), {"secret_key": "k"}, {}),
    "WenCai": ("WENCAI", ("POST", "/customized/chart/get-robot-data"), {}, {"query": "q"}),
}


@pytest.fixture(params=sorted(TOOLS))
def tool(request, web_api, monkeypatch):
    name = request.param
    service = TOOLS[name][0]
    for var in (f"TRELLIS_{service}_BASE_URL", f"TRELLIS_{service}_HTML_BASE_URL", f"TRELLIS_{service}_COOKIE_BASE_URL"):
        monkeypatch.setenv(var, web_api.url)
    return name, web_api


async def test_an_api_error_is_an_observation(tool):
    name, api = tool
    _, (method, path), params, args = TOOLS[name]
    api.route(method, path, Respond(403, '{"detail": {"error": "This request exceeds your plan."}}'))
    api.route("GET", "/", Respond(200, "", "text/html"))  # YahooFinance's cookie page
    observation, error, _ = await agent_call(name, params, args)
    assert observation == f"Error: {error}"
    assert "HTTP 403" in error and "exceeds your plan" in error and name in error
    assert len(api.seen(path)) == 1  # a 403 is final: no retry


async def test_a_server_error_is_retried_then_reported(tool):
    name, api = tool
    _, (method, path), params, args = TOOLS[name]
    api.route(method, path, Respond(502, "bad gateway", "text/plain", {"Retry-After": "0"}))
    api.route("GET", "/", Respond(200, "", "text/html"))
    observation, error, _ = await agent_call(name, params, args)
    assert observation.startswith("Error: ") and "HTTP 502" in error
    assert len(api.seen(path)) == 3


async def test_a_slow_service_is_a_timeout_observation(tool, monkeypatch):
    name, api = tool
    service, (method, path), params, args = TOOLS[name]
    monkeypatch.setenv(f"TRELLIS_{service}_TIMEOUT_S", "0.2")
    api.route(method, path, {"results": []}, delay=30)
    api.route("GET", "/", Respond(200, "", "text/html"))
    observation, error, _ = await agent_call(name, params, args)
    assert observation.startswith("Error: ") and f"{name} did not answer within 0.2 s" in error


async def test_a_private_address_is_refused_unless_allowed(tool):
    name, api = tool
    _, _, params, args = TOOLS[name]
    observation, error, _ = await agent_call(name, params, args, allow=False)
    assert observation.startswith("Error: ") and "loopback" in error and "allow-list" in error
    assert api.seen() == []
