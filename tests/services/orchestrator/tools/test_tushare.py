"""TuShare against a local server speaking the TuShare Pro API (POST {"api_name": "news", ...}).
Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import pytest

from services.orchestrator.components import get_class
from tests.support.tool_calls import agent_call, node_run

NEWS = {"request_id": "r1", "code": 0, "msg": "", "data": {
    "fields": ["datetime", "content", "title"],
    "items": [["2026-01-05 09:30:00", "茅台 raises prices", "Moutai"],
              ["2026-01-05 09:31:00", "Copper slips", None],
              ["2026-01-05 09:32:00", "Analysts on MOUTAI margins", "Margins"]]}}


@pytest.fixture
def tushare(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_TUSHARE_BASE_URL", web_api.url)
    monkeypatch.delenv("TUSHARE_API_KEY", raising=False)
    web_api.route("POST", "/", NEWS)
    return web_api


async def test_as_a_node_it_asks_for_the_news_and_keeps_those_with_the_keyword(tushare):
    params = {"token": "ts-1", "src": "sina", "start_date": "2026-01-05 09:00:00", "end_date": "2026-01-05 10:00:00",
              "keyword": "sys.query"}
    ctx = await node_run("TuShare", params, query="moutai")
    [seen] = tushare.seen("/")
    assert seen.json == {"api_name": "news", "token": "ts-1", "params": {
        "src": "sina", "start_date": "2026-01-05 09:00:00", "end_date": "2026-01-05 10:00:00"}}
    lines = ctx.outputs["content"].splitlines()
    assert lines[0].replace(" ", "") == "||datetime|content|title|"
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["2"]  # the index, as DataFrame.to_markdown
    assert "Analysts on MOUTAI margins" in lines[2] and ctx.outputs["formalized_content"] == ctx.outputs["content"]


async def test_as_an_agent_tool_the_model_gives_the_keyword_and_a_tushare_error_is_its_msg(tushare, monkeypatch):
    monkeypatch.setenv("TUSHARE_API_KEY", "ts-env")
    observation, error, _ = await agent_call("TuShare", {}, {"keyword": "copper"})
    assert error is None and "Copper slips" in observation and "茅台" not in observation
    assert tushare.seen()[0].json["token"] == "ts-env" and tushare.seen()[0].json["params"]["src"] == "eastmoney"
    tushare.route("POST", "/", {"code": 40203, "msg": "抱歉，您每分钟最多访问该接口1次"})
    observation, error, _ = await agent_call("TuShare", {}, {"keyword": "copper"})
    assert error is None and observation == "抱歉，您每分钟最多访问该接口1次"


async def test_no_token_names_both_places_and_src_is_validated(tushare):
    observation, error, _ = await agent_call("TuShare", {}, {"keyword": "x"})
    assert observation.startswith("Error: ") and "params.token" in error and "TUSHARE_API_KEY" in error
    assert [i.field for i in get_class("TuShare").check("TuShare:x", {"src": "reuters"})] == ["params.src"]
