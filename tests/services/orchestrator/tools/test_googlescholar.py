"""GoogleScholar against a local server answering /scholar with a results page in Google Scholar's markup
(the divs and classes the scholarly library reads). Failures are in test_tool_failures.py."""
from __future__ import annotations

import pytest

from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, references, tool_schema

PAGE = """<html><body><div id="gs_res_ccl_mid">
<div class="gs_r gs_or gs_scl" data-cid="A1" data-rp="0">
 <div class="gs_ggs gs_fl"><div class="gs_ggsd"><a href="https://arxiv.example/pdf/1706.03762">[PDF] arxiv.org</a></div></div>
 <div class="gs_ri"><h3 class="gs_rt"><span class="gs_ctu"><span class="gs_ct1">[PDF]</span></span>
   <a href="https://papers.example/attention" id="A1">Attention is all you need</a></h3>
  <div class="gs_a">A Vaswani,&nbsp;N Shazeer,&nbsp;N Parmar - Advances in neural information processing systems, 2017 - proceedings.example</div>
  <div class="gs_rs">The dominant sequence transduction models are based on complex recurrent or convolutional …</div>
  <div class="gs_fl gs_flb"><a href="/scholar?cites=1">Cited by 150000</a> <a href="/scholar?q=related:x">Related articles</a></div>
 </div></div>
<div class="gs_r gs_or gs_scl"><div class="gs_ri"><h3 class="gs_rt"><span class="gs_ctc"><span class="gs_ct1">[CITATION]</span></span>
   <a href="/citations?view_op=x">BERT: Pre-training of deep bidirectional transformers</a></h3>
  <div class="gs_a">J Devlin, MW Chang - arXiv preprint, 2018</div></div></div>
</div></body></html>"""


@pytest.fixture
def scholar(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_GOOGLESCHOLAR_BASE_URL", web_api.url)
    web_api.route("GET", "/scholar", Respond(200, PAGE, "text/html"))
    return web_api


async def test_the_search_url_is_scholarlys_and_the_model_sees_authors_and_abstracts(scholar):
    observation, error, ctx = await agent_call("GoogleScholar", {"year_low": 2015, "patents": False},
                                               {"query": "transformer attention"})
    assert error is None
    [seen] = scholar.seen("/scholar")
    assert dict(seen.query) == {"hl": "en", "q": "transformer attention", "as_ylo": "2015", "as_vis": "0",
                                "as_sdt": "1,33"}
    assert ("├── Title: Attention is all you need\n├── URL: https://papers.example/attention\n└── Content:\n\n"
            " author: A Vaswani,N Shazeer,N Parmar\n Abstract: The dominant sequence transduction models are based "
            "on complex recurrent or convolutional") in observation
    assert "Abstract: no abstract" in observation  # the second result has no snippet
    assert references(ctx)["doc_aggs"]["BERT: Pre-training of deep bidirectional transformers"]["url"] == \
        scholar.url + "/citations?view_op=x"


async def test_as_a_node_json_holds_scholarlys_publications(scholar):
    ctx = await node_run("GoogleScholar", {"query": "sys.query", "sort_by": "date", "top_n": 1}, query="bert")
    seen = scholar.seen()[0].query
    assert seen["scisbd"] == "1" and seen["as_sdt"] == "0,33"
    [pub] = ctx.outputs["json"]
    assert pub["bib"]["venue"] == "Advances in neural information processing systems"
    assert pub["bib"]["pub_year"] == "2017" and pub["num_citations"] == 150000
    assert pub["eprint_url"] == "https://arxiv.example/pdf/1706.03762"


async def test_a_captcha_page_is_an_error(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_GOOGLESCHOLAR_BASE_URL", web_api.url)
    web_api.route("GET", "/scholar", Respond(200, '<html><form id="gs_captcha_f"><div class="g-recaptcha">', "text/html"))
    observation, error, _ = await agent_call("GoogleScholar", {}, {"query": "q"})
    assert observation.startswith("Error: ") and "CAPTCHA" in error


def test_the_model_is_offered_ragflows_function():
    schema = tool_schema("GoogleScholar")
    assert schema.name == "google_scholar_search_0" and schema.description.startswith("Google Scholar provides")
