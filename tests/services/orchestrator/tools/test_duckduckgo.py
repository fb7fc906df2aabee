"""DuckDuckGo against a local server speaking its HTML results page and its news.js JSON."""
from __future__ import annotations

import pytest

from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

PAGE = """<html><body><div class="serp__results"><div id="links" class="results">
<div class="result results_links results_links_deep web-result"><div class="links_main links_deep result__body">
 <h2 class="result__title"><a rel="nofollow" class="result__a"
   href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fpython.example%2Fasyncio&amp;rut=ab">asyncio &amp; friends</a></h2>
 <a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fpython.example%2Fasyncio&amp;rut=ab">
   <b>asyncio</b> is a library to write concurrent code.</a>
</div></div>
<div class="result results_links results_links_deep result--ad"><div class="links_main links_deep result__body">
 <h2 class="result__title"><a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=x">An ad</a></h2>
 <a class="result__snippet" href="https://duckduckgo.com/y.js?ad_domain=x">Buy now</a>
</div></div>
<div class="result results_links results_links_deep web-result"><div class="links_main links_deep result__body">
 <h2 class="result__title"><a class="result__a" href="https://trio.example/">Trio</a></h2>
 <a class="result__snippet" href="https://trio.example/">Trio: structured concurrency.</a>
</div></div>
</div></div></body></html>"""


@pytest.fixture
def ddg(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_DUCKDUCKGO_BASE_URL", web_api.url)
    monkeypatch.setenv("TRELLIS_DUCKDUCKGO_HTML_BASE_URL", web_api.url)
    return web_api


async def test_web_search_posts_the_form_and_the_model_sees_the_parsed_results(ddg):
    ddg.route("POST", "/html", Respond(200, PAGE, "text/html"))
    observation, error, ctx = await agent_call("DuckDuckGo", {"top_n": 10, "channel": "text"},
                                               {"query": "python concurrency"})
    assert error is None
    [seen] = ddg.seen("/html")
    assert seen.form == {"q": "python concurrency", "b": ""}
    assert "├── Title: asyncio & friends\n├── URL: https://python.example/asyncio" in observation
    assert "asyncio is a library to write concurrent code." in observation
    assert "An ad" not in observation and "Trio: structured concurrency." in observation
    assert len(references(ctx)["chunks"]) == 2
    assert tool_schema("DuckDuckGo").parameters["properties"]["channel"]["enum"] == ["general", "news"]


async def test_top_n_caps_the_results(ddg):
    ddg.route("POST", "/html", Respond(200, PAGE, "text/html"))
    ctx = await node_run("DuckDuckGo", {"top_n": 1, "query": "sys.query"}, query="python")
    assert [r["title"] for r in ctx.outputs["json"]] == ["asyncio & friends"]


async def test_news_gets_a_vqd_token_then_the_news_json(ddg):
    ddg.route("GET", "/", Respond(200, '<html><script>vqd="4-12345678901234567890";</script></html>', "text/html"))
    ddg.route("GET", "/news.js", lambda seen: {"results": [
        {"date": 1767225600, "title": "Python 3.15 released", "excerpt": "The <b>release</b> brings JIT.",
         "url": "https://news.example/py315", "image": "", "source": "News Example"}]}
        if seen.query.get("vqd") == "4-12345678901234567890" else Respond(403, "bad vqd"))
    observation, error, _ = await agent_call("DuckDuckGo", {}, {"query": "python release", "channel": "news"})
    assert error is None
    news_call = ddg.seen("/news.js")[0]
    assert news_call.query["q"] == "python release" and news_call.query["o"] == "json"
    assert "Python 3.15 released" in observation and "The release brings JIT." in observation
