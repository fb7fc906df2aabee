"""YahooFinance against a local server speaking Yahoo Finance's API (cookie, crumb, quoteSummary, timeseries...)."""
from __future__ import annotations

import pytest

from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, tool_schema

CRUMB = "Xy1.aBcD2eF"


def needs_crumb(answer):
    """Yahoo answers 401 without the crumb and the cookie from fc.yahoo.com."""
    def handle(seen):
        if seen.query.get("crumb") != CRUMB or seen.headers.get("Cookie") != "A3=d=AQABBcookie":
            return Respond(401, '{"finance":{"error":{"code":"Unauthorized","description":"Invalid Crumb"}}}')
        return answer(seen) if callable(answer) else answer
    return handle


def timeseries(seen):
    scale = "annual" if seen.query["type"].startswith("annual") else "quarterly"
    return {"timeseries": {"result": [
        {"meta": {"symbol": ["NVDA"], "type": [f"{scale}TotalAssets"]}, "timestamp": [1706659200, 1738281600],
         f"{scale}TotalAssets": [
             {"asOfDate": "2024-01-31", "periodType": "12M", "reportedValue": {"raw": 65728000000, "fmt": "65.73B"}},
             {"asOfDate": "2025-01-31", "periodType": "12M", "reportedValue": {"raw": 111601000000, "fmt": "111.6B"}}]},
        {"meta": {"symbol": ["NVDA"], "type": [f"{scale}Goodwill"]}, "timestamp": [1738281600],
         f"{scale}Goodwill": [{"asOfDate": "2025-01-31", "reportedValue": {"raw": 5188000000}}]},
    ], "error": None}}


@pytest.fixture
def yahoo(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_YAHOOFINANCE_BASE_URL", web_api.url)
    monkeypatch.setenv("TRELLIS_YAHOOFINANCE_COOKIE_BASE_URL", web_api.url + "/fc")
    web_api.route("GET", "/fc/", Respond(404, "", "text/html", {"Set-Cookie": "A3=d=AQABBcookie; Domain=.yahoo.com"}))
    web_api.route("GET", "/v1/test/getcrumb", lambda seen: Respond(200, CRUMB, "text/plain")
                  if seen.headers.get("Cookie") == "A3=d=AQABBcookie" else Respond(401, "no cookie"))
    return web_api


async def test_balance_sheet_as_the_stock_template_asks_reaches_the_model_as_a_report(yahoo):
    yahoo.route("GET", "/ws/fundamentals-timeseries/v1/finance/timeseries/NVDA", needs_crumb(timeseries))
    params = {"balance_sheet": True, "cash_flow_statement": False, "financials": False, "history": False,
              "info": False, "news": False, "stock_code": "sys.query"}
    observation, error, _ = await agent_call("YahooFinance", params, {"stock_code": "NVDA"})
    assert error is None, error
    annual, quarterly = yahoo.seen("/ws/fundamentals-timeseries/v1/finance/timeseries/NVDA")
    assert annual.query["symbol"] == "NVDA" and annual.query["type"].startswith("annualTotalAssets,")
    assert quarterly.query["type"].startswith("quarterlyTotalAssets,")
    assert observation.startswith("# Balance sheet:\n|  | 2025-01-31 | 2024-01-31 |")
    assert "| Total Assets | 111601000000 | 65728000000 |" in observation
    assert "| Goodwill | 5188000000 |  |" in observation
    assert "# Quarterly balance sheet:" in observation


async def test_info_and_news_by_default(yahoo):
    yahoo.route("GET", "/v10/finance/quoteSummary/AAPL", needs_crumb({"quoteSummary": {"result": [{
        "price": {}, "summaryDetail": {"marketCap": 3400000000000, "currency": "USD"},
        "assetProfile": {"sector": "Technology", "companyOfficers": [{"name": "Tim"}]}}], "error": None}}))
    yahoo.route("GET", "/v1/finance/search", needs_crumb({"news": [
        {"uuid": "u1", "title": "Apple ships new chips", "publisher": "Example Wire",
         "link": "https://news.example/apple", "providerPublishTime": 1767225600}]}))
    ctx = await node_run("YahooFinance", {"stock_code": "sys.query"}, query="AAPL")
    report = ctx.outputs["report"]
    assert yahoo.seen("/v10/finance/quoteSummary/AAPL")[0].query["modules"] == (
        "financialData,quoteType,defaultKeyStatistics,assetProfile,summaryDetail")
    assert "# Information:" in report and "| marketCap | 3400000000000 |" in report and "| sector | Technology |" in report
    assert "# News:" in report and "| 0 | Apple ships new chips | Example Wire | https://news.example/apple | 2026-01-01 |" in report
    assert yahoo.seen("/v1/finance/search")[0].query["q"] == "AAPL"


async def test_history_and_calendar(yahoo):
    yahoo.route("GET", "/v8/finance/chart/MSFT", needs_crumb({"chart": {"result": [{
        "timestamp": [1767225600, 1767312000],
        "indicators": {"quote": [{"open": [500.0, 505.5], "high": [510.0, 512.0], "low": [498.0, 503.0],
                                  "close": [505.0, 511.0], "volume": [1000, 2000]}]}}], "error": None}}))
    yahoo.route("GET", "/v10/finance/quoteSummary/MSFT", needs_crumb({"quoteSummary": {"result": [{
        "calendarEvents": {"earnings": {"earningsDate": [1769817600]}, "exDividendDate": 1768435200}}]}}))
    ctx = await node_run("YahooFinance", {"info": False, "news": False, "history": True, "financials": True,
                                          "stock_code": "sys.query"}, query="MSFT")
    report = ctx.outputs["report"]
    assert "| 2026-01-02 | 505.5 | 512.0 | 503.0 | 511.0 | 2000 |" in report
    assert "| earnings earningsDate | 2026-01-31 |" in report and "| exDividendDate | 2026-01-15 |" in report


async def test_an_unknown_symbol_is_an_error_the_model_sees(yahoo):
    yahoo.route("GET", "/v10/finance/quoteSummary/NOPE", needs_crumb(Respond(
        404, '{"quoteSummary":{"result":null,"error":{"code":"Not Found","description":"Quote not found for symbol: NOPE"}}}')))
    observation, error, _ = await agent_call("YahooFinance", {"news": False}, {"stock_code": "NOPE"})
    assert observation.startswith("Error: ") and "Quote not found for symbol: NOPE" in error
    assert tool_schema("YahooFinance").parameters["required"] == ["stock_code"]
