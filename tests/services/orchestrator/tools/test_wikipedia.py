"""Wikipedia against a local server speaking the MediaWiki query API (generator=search + extracts)."""
from __future__ import annotations

import pytest

from services.orchestrator.components import get_class
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

PAGES = {"query": {"pages": {
    "2": {"pageid": 2, "ns": 0, "title": "Ada Lovelace (disambiguation)", "index": 2,
          "pageprops": {"disambiguation": ""}, "fullurl": "https://en.wikipedia.org/wiki/Ada_Lovelace_(disambiguation)",
          "extract": "Ada Lovelace may refer to:"},
    "1": {"pageid": 1, "ns": 0, "title": "Ada Lovelace", "index": 1,
          "fullurl": "https://en.wikipedia.org/wiki/Ada_Lovelace",
          "extract": "Augusta Ada King, Countess of Lovelace, was an English mathematician."},
    "3": {"pageid": 3, "ns": 0, "title": "Analytical engine", "index": 3,
          "fullurl": "https://en.wikipedia.org/wiki/Analytical_engine",
          "extract": "The analytical engine was a proposed digital mechanical general-purpose computer."},
}}}


@pytest.fixture
def wiki(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_WIKIPEDIA_BASE_URL", web_api.url)
    return web_api


async def test_search_asks_for_intros_and_urls_and_the_model_sees_the_pages_in_order(wiki):
    wiki.route("GET", "/w/api.php", PAGES)
    observation, error, ctx = await agent_call("Wikipedia", {"language": "en", "top_n": 10}, {"query": "Ada Lovelace"})
    assert error is None
    [seen] = wiki.seen("/w/api.php")
    assert seen.query["generator"] == "search" and seen.query["gsrsearch"] == "Ada Lovelace"
    assert seen.query["gsrlimit"] == "10" and seen.query["prop"] == "extracts|info|pageprops"
    assert seen.query["explaintext"] == "1" and seen.query["inprop"] == "url"
    assert observation.index("English mathematician") < observation.index("analytical engine was")
    assert "may refer to" not in observation  # disambiguation pages are left out
    assert "├── URL: https://en.wikipedia.org/wiki/Ada_Lovelace" in observation
    assert {a["doc_name"] for a in references(ctx)["doc_aggs"].values()} == {"Ada Lovelace", "Analytical engine"}
    assert tool_schema("Wikipedia").name == "wikipedia_search_0"


async def test_the_language_picks_the_wiki(monkeypatch, wiki):
    monkeypatch.setenv("TRELLIS_WIKIPEDIA_BASE_URL", wiki.url + "/{language}")
    wiki.route("GET", "/de/w/api.php", {"query": {"pages": {}}})
    ctx = await node_run("Wikipedia", {"language": "de", "top_n": 3, "query": "sys.query"}, query="Rhein")
    assert wiki.seen()[0].path == "/de/w/api.php" and wiki.seen()[0].query["gsrlimit"] == "3"
    assert ctx.outputs["formalized_content"] == "" and ctx.outputs["json"] == []


async def test_a_mediawiki_error_reaches_the_model(wiki):
    wiki.route("GET", "/w/api.php", {"error": {"code": "maxlag", "info": "Waiting for a database server: 6 seconds lagged."}})
    observation, error, _ = await agent_call("Wikipedia", {}, {"query": "x"})
    assert observation.startswith("Error: ") and "database server" in error


def test_validation_names_an_unknown_language():
    [issue] = get_class("Wikipedia").check("Wikipedia:x", {"language": "klingon"})
    assert issue.field == "params.language"
