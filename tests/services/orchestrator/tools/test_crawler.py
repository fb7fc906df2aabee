"""Crawler against a local web site: the page as Markdown, clean HTML or text; errors, slowness and
private addresses as observations (its URL comes from the model, so it is not in test_tool_failures.py)."""
from __future__ import annotations

import pytest

from services.orchestrator.components import get_class
from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, tool_schema

PAGE = """<!doctype html><html><head><title>Solar report</title><style>p {color: red}</style>
<script>track()</script></head><body><nav>Home | About</nav>
<h1>Solar in 2026</h1><p>Capacity grew <b>30%</b>, see <a href="https://iea.example/r">IEA</a>.</p>
<ul><li>China</li><li>India</li></ul><form><input name="q"></form><footer>© site</footer></body></html>"""


@pytest.fixture
def site(web_api):
    web_api.route("GET", "/report", Respond(200, PAGE, "text/html"))
    return web_api


async def test_the_model_gets_the_page_as_markdown(site):
    observation, error, _ = await agent_call("Crawler", {}, {"query": site.url + "/report"})
    assert error is None
    assert observation == ("# Solar in 2026\n\nCapacity grew **30%**, see [IEA](https://iea.example/r).\n\n"
                           "* China\n* India")
    assert site.seen("/report")[0].headers["Accept"].startswith("text/html")


async def test_html_and_content_extract_types(site):
    ctx = await node_run("Crawler", {"query": "sys.query", "extract_type": "html"}, query=site.url + "/report")
    html = ctx.outputs["formalized_content"]
    assert "<h1>Solar in 2026</h1>" in html and "<script" not in html and "track()" not in html
    assert "<style" not in html and "<input" not in html
    ctx = await node_run("Crawler", {"query": "sys.query", "extract_type": "content"}, query=site.url + "/report")
    text = ctx.outputs["formalized_content"]
    assert "Capacity grew 30%, see IEA." in text and "<" not in text and "track()" not in text


async def test_a_bad_url_an_http_error_and_a_redirect_are_observations(site):
    site.route("GET", "/gone", Respond(404, "not here", "text/plain"))
    site.route("GET", "/moved", Respond(301, "", "text/plain", {"Location": "https://elsewhere.example/"}))
    observation, error, _ = await agent_call("Crawler", {}, {"query": "www.example.com"})
    assert observation.startswith("Error: ") and "URL not valid" in error and "query" in error
    _, error, _ = await agent_call("Crawler", {}, {"query": site.url + "/gone"})
    assert "HTTP 404" in error and "not here" in error
    _, error, _ = await agent_call("Crawler", {}, {"query": site.url + "/moved"})
    assert "HTTP 301 to https://elsewhere.example/" in error


async def test_a_slow_page_times_out(site, monkeypatch):
    monkeypatch.setenv("TRELLIS_CRAWLER_TIMEOUT_S", "0.2")
    site.route("GET", "/slow", Respond(200, PAGE, "text/html"), delay=30)
    observation, error, _ = await agent_call("Crawler", {}, {"query": site.url + "/slow"})
    assert observation.startswith("Error: ") and "Crawler did not answer within 0.2 s" in error


async def test_a_private_address_is_refused_unless_allowed(site):
    observation, error, _ = await agent_call("Crawler", {}, {"query": site.url + "/report"}, allow=False)
    assert observation.startswith("Error: ") and "loopback" in error and "query" in error
    assert site.seen() == []


def test_the_model_is_offered_ragflows_function_and_extract_type_is_checked():
    schema = tool_schema("Crawler")
    assert schema.name == "web_crawler_0" and schema.parameters["required"] == ["query"]
    issues = get_class("Crawler").check("Crawler:x", {"extract_type": "pdf"})
    assert [i.field for i in issues] == ["params.extract_type"]
