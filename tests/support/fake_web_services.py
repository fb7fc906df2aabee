"""The web services the RAGFlow templates call, as one local fake speaking each API's shape.

    async with fake_web(monkeypatch) as web:      # every TRELLIS_<SERVICE>_BASE_URL points at it, keys are set
        ... run a canvas with services(llm, settings=allow_local()) ...
        web.seen("/search")                        # what the tools sent

Answers are derived from the request, so a test can tell which query produced which result:
Tavily /search -> two results titled "<query> overview" / "<query> figures" at https://web.example/<slug>/1|2;
Tavily /extract -> "Page text of <url>"; SerpApi, Bing, DuckDuckGo and Wikipedia -> one result each naming
the query; Yahoo Finance -> cookie, crumb and a balance sheet (TotalAssets, Goodwill) for any symbol.
"""
from __future__ import annotations

import re
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from tests.support.fake_web_api import FakeWebApi, Respond

SERVICES = ("TAVILY", "SERPAPI", "BING", "DUCKDUCKGO", "DUCKDUCKGO_HTML", "WIKIPEDIA", "YAHOOFINANCE",
            "YAHOOFINANCE_COOKIE")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def tavily_results(query: str) -> list[dict[str, Any]]:
    return [{"title": f"{query} overview", "url": f"https://web.example/{slug(query)}/1", "score": 0.9,
             "content": f"Overview of {query}: the key facts.", "raw_content": None},
            {"title": f"{query} figures", "url": f"https://web.example/{slug(query)}/2", "score": 0.7,
             "content": f"Figures on {query}: 42 percent growth.", "raw_content": None}]


def _ddg_page(seen: Any) -> Respond:
    q = seen.form.get("q", "")
    return Respond(200, f'<html><body><div class="result"><div class="links_main"><h2><a href="https://ddg.example/'
                        f'{slug(q)}">DuckDuckGo: {q}</a></h2><a href="https://ddg.example/{slug(q)}">Privacy-first '
                        f'results on {q}.</a></div></div></body></html>', "text/html")


def _timeseries(seen: Any) -> dict[str, Any]:
    scale = "annual" if seen.query["type"].startswith("annual") else "quarterly"
    return {"timeseries": {"result": [
        {"meta": {"type": [f"{scale}TotalAssets"]}, f"{scale}TotalAssets": [
            {"asOfDate": "2025-01-31", "reportedValue": {"raw": 111601000000}}]},
        {"meta": {"type": [f"{scale}Goodwill"]}, f"{scale}Goodwill": [
            {"asOfDate": "2025-01-31", "reportedValue": {"raw": 5188000000}}]}]}}


@asynccontextmanager
async def fake_web(monkeypatch: Any) -> AsyncIterator[FakeWebApi]:
    async with FakeWebApi() as web:
        for service in SERVICES:
            monkeypatch.setenv(f"TRELLIS_{service}_BASE_URL", web.url)
        for service in ("TAVILY", "SERPAPI", "BING"):  # the templates ship without keys: the deployment's env has them
            monkeypatch.setenv(f"{service}_API_KEY", f"{service.lower()}-env-key")
        web.route("POST", "/search", lambda s: {"query": s.json["query"], "answer": None, "images": [],
                                                "results": tavily_results(s.json["query"]), "response_time": 0.1})
        web.route("POST", "/extract", lambda s: {"results": [{"url": u, "raw_content": f"Page text of {u}"}
                                                             for u in s.json["urls"]], "failed_results": []})
        web.route("GET", "/search.json", lambda s: {"organic_results": [
            {"title": f"Google: {s.query['q']}", "link": f"https://google.example/{slug(s.query['q'])}",
             "snippet": f"Google's top result on {s.query['q']}."}]})
        web.route("GET", "/v7.0/search", lambda s: {"webPages": {"value": [
            {"name": f"Bing: {s.query['q']}", "url": f"https://bing.example/{slug(s.query['q'])}",
             "snippet": f"Bing's page on {s.query['q']}."}]}})
        web.route("POST", "/html", _ddg_page)
        web.route("GET", "/w/api.php", lambda s: {"query": {"pages": {"7": {
            "title": f"Wikipedia: {s.query['gsrsearch']}", "index": 1,
            "fullurl": f"https://wiki.example/{slug(s.query['gsrsearch'])}",
            "extract": f"The encyclopedia article on {s.query['gsrsearch']}."}}}})
        web.route("GET", "/", Respond(404, "", "text/html", {"Set-Cookie": "A3=cookie; Domain=.yahoo.com"}))
        web.route("GET", "/v1/test/getcrumb", Respond(200, "crumb-1", "text/plain"))
        web.route("GET", "/ws/fundamentals-timeseries/v1/finance/timeseries/NVDA", _timeseries)
        yield web
