"""AkShare against a local server answering East Money's news search JSONP, as akshare's stock_news_em
reads it. Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import json

import pytest

from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, tool_schema

ARTICLES = [
    {"date": "2026-01-05 09:30:00", "mediaName": "证券时报", "code": "202601053001",
     "title": "(<em>600519</em>)贵州茅台发布年报", "content": "<em>贵州茅台</em>\u3000营收增长15%。\r\n净利润创新高",
     "url": "http://finance.eastmoney.com/a/202601053001.html", "image": ""},
    {"date": "2026-01-04 15:00:00", "mediaName": "东方财富网", "code": "202601043002",
     "title": "白酒板块走强", "content": "茅台领涨", "image": ""},
]


def jsonp(seen):
    callback = seen.query["cb"]
    return Respond(200, f"{callback}({json.dumps({'code': 0, 'result': {'cmsArticleWebOld': ARTICLES}})})",
                   "application/javascript")


@pytest.fixture
def eastmoney(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_AKSHARE_BASE_URL", web_api.url)
    web_api.route("GET", "/search/jsonp", jsonp)
    return web_api


async def test_the_model_sees_ragflows_news_text(eastmoney):
    observation, error, _ = await agent_call("AkShare", {}, {"query": "600519"})
    assert error is None
    [seen] = eastmoney.seen("/search/jsonp")
    param = json.loads(seen.query["param"])
    assert param["keyword"] == "600519" and param["type"] == ["cmsArticleWebOld"]
    assert param["param"]["cmsArticleWebOld"]["pageIndex"] == 1
    assert observation == (
        '<a href="http://finance.eastmoney.com/a/202601053001.html">600519贵州茅台发布年报</a>\n'
        " 新闻内容: 贵州茅台营收增长15%。 净利润创新高 \n发布时间:2026-01-05 09:30:00 \n文章来源: 证券时报\n\n"
        '<a href="http://finance.eastmoney.com/a/202601043002.html">白酒板块走强</a>\n'
        " 新闻内容: 茅台领涨 \n发布时间:2026-01-04 15:00:00 \n文章来源: 东方财富网")


async def test_as_a_node_top_n_limits_the_articles(eastmoney):
    ctx = await node_run("AkShare", {"query": "sys.query", "top_n": 1}, query="600519")
    assert "贵州茅台发布年报" in ctx.outputs["formalized_content"]
    assert "白酒板块走强" not in ctx.outputs["formalized_content"]


async def test_an_answer_in_another_shape_is_a_clear_error(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_AKSHARE_BASE_URL", web_api.url)
    web_api.route("GET", "/search/jsonp", Respond(200, "<html>blocked</html>", "text/html"))
    observation, error, _ = await agent_call("AkShare", {}, {"query": "600519"})
    assert observation.startswith("Error: ") and "not what akshare reads" in error


def test_the_model_is_offered_ragflows_function():
    assert tool_schema("AkShare").name == "akshare_stock_news_0"
