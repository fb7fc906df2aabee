"""ArXiv and PubMed against local servers speaking arXiv's Atom export API and NCBI's E-utilities XML.
Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import pytest

from tests.support.fake_web_api import Respond
from tests.support.paper_apis import EFETCH, ESEARCH, FEED
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

@pytest.fixture
def arxiv(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_ARXIV_BASE_URL", web_api.url)
    web_api.route("GET", "/api/query", Respond(200, FEED, "application/atom+xml"))
    return web_api


async def test_arxiv_sends_the_librarys_query_and_the_model_sees_the_abstracts(arxiv):
    observation, error, ctx = await agent_call("ArXiv", {"top_n": 5, "sort_by": "relevance"}, {"query": "rag"})
    assert error is None
    [seen] = arxiv.seen("/api/query")
    assert dict(seen.query) == {"search_query": "rag", "id_list": "", "sortBy": "relevance",
                                "sortOrder": "descending", "start": "0", "max_results": "5"}
    assert ("├── Title: Retrieval-Augmented Generation at Scale\n├── URL: http://arxiv.org/pdf/2401.00001v1"
            "\n└── Content:\nWe study retrieval for large models.") in observation
    [chunk] = references(ctx)["chunks"].values()
    assert chunk["url"] == "http://arxiv.org/pdf/2401.00001v1"


async def test_arxiv_as_a_node_outputs_the_papers(arxiv):
    ctx = await node_run("ArXiv", {"query": "sys.query"}, query="graphs")
    assert arxiv.seen()[0].query["sortBy"] == "submittedDate" and arxiv.seen()[0].query["max_results"] == "12"
    [paper] = ctx.outputs["json"]
    assert paper["authors"] == ["Ada Lovelace", "Alan Turing"] and paper["entry_id"].endswith("2401.00001v1")


async def test_arxiv_answering_html_is_a_clear_error(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_ARXIV_BASE_URL", web_api.url)
    web_api.route("GET", "/api/query", Respond(200, "<html><body>Rate exceeded", "text/html"))
    observation, error, _ = await agent_call("ArXiv", {}, {"query": "q"})
    assert observation.startswith("Error: ") and "not an Atom feed" in error


@pytest.fixture
def pubmed(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_PUBMED_BASE_URL", web_api.url)
    monkeypatch.delenv("PUBMED_API_KEY", raising=False)
    web_api.route("GET", "/entrez/eutils/esearch.fcgi", Respond(200, ESEARCH, "text/xml"))
    web_api.route("GET", "/entrez/eutils/efetch.fcgi", Respond(200, EFETCH, "text/xml"))
    return web_api


async def test_pubmed_searches_then_fetches_and_the_model_sees_ragflows_reference_text(pubmed):
    observation, error, ctx = await agent_call("PubMed", {"top_n": 2, "email": "me@lab.example"}, {"query": "crispr"})
    assert error is None
    [search] = pubmed.seen("/entrez/eutils/esearch.fcgi")
    assert dict(search.query) == {"db": "pubmed", "retmax": "2", "term": "crispr", "tool": "biopython",
                                  "email": "me@lab.example"}
    [fetch] = pubmed.seen("/entrez/eutils/efetch.fcgi")
    assert fetch.query["id"] == "38000001,38000002" and fetch.query["retmode"] == "xml"
    assert ("├── Title: CRISPR in vivo editing\n├── URL: https://pubmed.ncbi.nlm.nih.gov/38000001\n└── Content:\n"
            "Title: CRISPR in vivo editing\nAuthors: Jennifer Doudna\nJournal: Nature Medicine\nVolume: 12\n"
            "Issue: 3\nPages: 100-110\nDOI: 10.1000/nm.1\nAbstract: Editing works in mice.") in observation
    assert "Authors: Unknown Authors\nJournal: Cell\nVolume: -" in observation
    assert references(ctx)["doc_aggs"]["Base editors"]["url"] == "https://pubmed.ncbi.nlm.nih.gov/38000002"


async def test_pubmed_with_no_hits_fetches_nothing(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_PUBMED_BASE_URL", web_api.url)
    monkeypatch.setenv("PUBMED_API_KEY", "ncbi-key")
    web_api.route("GET", "/entrez/eutils/esearch.fcgi",
                  Respond(200, "<eSearchResult><Count>0</Count><IdList/></eSearchResult>", "text/xml"))
    observation, error, _ = await agent_call("PubMed", {}, {"query": "nothing"})
    assert error is None and observation == ""
    assert web_api.seen("/entrez/eutils/efetch.fcgi") == []
    assert web_api.seen()[0].query["api_key"] == "ncbi-key"


def test_arxiv_and_pubmed_offer_ragflows_functions():
    assert tool_schema("ArXiv").name == "arxiv_search_0"
    pubmed = tool_schema("PubMed")
    assert pubmed.name == "pubmed_search_0" and pubmed.description.startswith("PubMed is an openly accessible")
