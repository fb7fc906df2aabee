"""Jin10 against a local server speaking the Jin10 Open Platform's data API.
Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import pytest

from services.orchestrator.components import get_class
from tests.support.tool_calls import agent_call, node_run


@pytest.fixture
def jin10(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_JIN10_BASE_URL", web_api.url)
    monkeypatch.delenv("JIN10_API_KEY", raising=False)
    web_api.route("GET", "/data-api/flash", {"status": 200, "message": "", "data": [
        {"id": "1", "time": "2026-01-05 09:30:00", "type": 0, "data": {"content": "美联储维持利率不变"}},
        {"id": "2", "time": "2026-01-05 09:31:00", "type": 0, "data": {"content": "黄金上涨1%"}}]})
    web_api.route("GET", "/data-api/quotes", {"status": 200, "data": [
        {"a": 1.2, "b": 1.1, "c": "BTCUSD", "e": "CRYPTO", "h": 2, "hc": 1, "l": 0.5, "o": 1, "p": 1.15,
         "t": "2026-01-05 09:30:00"}]})
    web_api.route("GET", "/data-api/calendar/event", {"status": 200, "data": [
        {"pub_time": "2026-01-06 21:30", "country": "美国", "name": "非农就业"}]})
    return web_api


async def test_flash_news_sends_the_key_and_category_and_the_model_sees_each_item(jin10):
    observation, error, _ = await agent_call("Jin10", {"secret_key": "j-1", "flash_type": "3"}, {"contain": "黄金"})
    assert error is None and observation == "美联储维持利率不变\n黄金上涨1%"
    [seen] = jin10.seen("/data-api/flash")
    assert seen.headers["secret-key"] == "j-1" and dict(seen.query) == {"category": "3"}
    assert seen.json == {"category": "3", "contain": "黄金", "filter": ""}


async def test_quotes_and_calendar_are_markdown_tables_with_ragflows_columns(jin10, monkeypatch):
    monkeypatch.setenv("JIN10_API_KEY", "j-env")
    ctx = await node_run("Jin10", {"type": "symbols", "symbols_datatype": "quotes", "symbols_type": "CRYPTO"})
    [seen] = jin10.seen("/data-api/quotes")
    assert dict(seen.query) == {"type": "CRYPTO"} and seen.json == {"type": "CRYPTO", "codes": "BTCUSD"}
    header = ctx.outputs["content"].splitlines()[0]
    assert "Selling Price" in header and "Latest Price" in header and "Yesterday’s Closing Price" in header
    assert "| BTCUSD" in ctx.outputs["content"].splitlines()[2]
    ctx = await node_run("Jin10", {"type": "calendar", "calendar_datatype": "event", "calendar_type": "us"})
    assert jin10.seen("/data-api/calendar/event")[0].query["category"] == "us"
    assert "非农就业" in ctx.outputs["content"] and ctx.outputs["content"].startswith("|")


async def test_no_key_names_both_places_and_choices_are_validated(jin10):
    observation, error, _ = await agent_call("Jin10", {}, {})
    assert observation.startswith("Error: ") and "secret_key" in error and "JIN10_API_KEY" in error
    issues = get_class("Jin10").check("Jin10:x", {"type": "stocks", "flash_type": "9"})
    assert {i.field for i in issues} == {"params.type", "params.flash_type"}
