"""DeepL and QWeather against local servers speaking DeepL's v2 API and QWeather's GeoAPI + v7 API.
Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import pytest

from services.orchestrator.components import get_class
from tests.support.tool_calls import agent_call, node_run, tool_schema

NOW = {"obsTime": "2026-01-01T10:00+08:00", "temp": "3", "text": "晴", "windDir": "北风"}


@pytest.fixture
def api(web_api, monkeypatch):
    for var in ("TRELLIS_DEEPL_BASE_URL", "TRELLIS_DEEPL_FREE_BASE_URL", "TRELLIS_QWEATHER_BASE_URL",
                "TRELLIS_QWEATHER_API_BASE_URL", "TRELLIS_QWEATHER_DEVAPI_BASE_URL"):
        monkeypatch.setenv(var, web_api.url)
    monkeypatch.delenv("DEEPL_API_KEY", raising=False)
    monkeypatch.delenv("QWEATHER_API_KEY", raising=False)
    return web_api


def translate(seen):
    return {"translations": [{"detected_source_language": "ZH", "text": f"translated({seen.json['text'][0]})"}]}


async def test_deepl_sends_the_key_and_languages_and_the_model_sees_the_translation(api):
    api.route("POST", "/v2/translate", translate)
    observation, error, _ = await agent_call("DeepL", {"auth_key": "dk-1", "target_lang": "EN-US"}, {"query": "你好"})
    assert error is None and observation == "translated(你好)"
    [seen] = api.seen("/v2/translate")
    assert seen.headers["Authorization"] == "DeepL-Auth-Key dk-1"
    assert seen.json == {"text": ["你好"], "source_lang": "ZH", "target_lang": "EN-US"}


async def test_deepl_free_keys_go_to_the_free_host(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_DEEPL_BASE_URL", "https://pro.invalid")  # must not be used
    monkeypatch.setenv("TRELLIS_DEEPL_FREE_BASE_URL", web_api.url)
    monkeypatch.setenv("DEEPL_API_KEY", "abc:fx")
    web_api.route("POST", "/v2/translate", translate)
    ctx = await node_run("DeepL", {"query": "sys.query"}, query="早上好")  # the "xxx" default is no key
    assert ctx.outputs["formalized_content"] == "translated(早上好)"
    assert web_api.seen()[0].headers["Authorization"] == "DeepL-Auth-Key abc:fx"


async def test_deepl_without_a_key_names_both_places(api):
    observation, error, _ = await agent_call("DeepL", {}, {"query": "x"})
    assert observation.startswith("Error: ") and "auth_key" in error and "DEEPL_API_KEY" in error


def test_deepl_and_qweather_validate_their_choices():
    assert [i.field for i in get_class("DeepL").check("DeepL:x", {"target_lang": "EN"})] == ["params.target_lang"]
    issues = get_class("QWeather").check("QWeather:x", {"type": "rain", "time_period": "2d"})
    assert {i.field for i in issues} == {"params.type", "params.time_period"}


def lookup(seen):
    return {"code": "200", "location": [{"name": seen.query["location"], "id": "101010100"}]}


async def test_qweather_looks_up_the_city_then_the_current_weather(api):
    api.route("GET", "/v2/city/lookup", lookup)
    api.route("GET", "/v7/weather/now", {"code": "200", "updateTime": "x", "now": NOW})
    observation, error, _ = await agent_call("QWeather", {"web_apikey": "qw-1", "lang": "en"}, {"query": "Beijing"})
    assert error is None and observation == str(NOW)
    assert dict(api.seen("/v2/city/lookup")[0].query) == {"location": "Beijing", "key": "qw-1"}
    assert dict(api.seen("/v7/weather/now")[0].query) == {"location": "101010100", "key": "qw-1", "lang": "en"}


async def test_qweather_forecast_indices_and_air_quality(api, monkeypatch):
    monkeypatch.setenv("QWEATHER_API_KEY", "qw-env")
    api.route("GET", "/v2/city/lookup", lookup)
    days = [{"fxDate": "2026-01-01", "tempMax": "5"}, {"fxDate": "2026-01-02", "tempMax": "6"}]
    api.route("GET", "/v7/weather/3d", {"code": "200", "daily": days})
    api.route("GET", "/v7/indices/1d", {"code": "200", "daily": [
        {"date": "2026-01-01", "name": "运动指数", "category": "较适宜", "text": "天气较好"},
        {"date": "2026-01-01", "name": "洗车指数", "category": "适宜", "text": "无雨"}]})
    api.route("GET", "/v7/air/now", {"code": "200", "now": {"aqi": "42", "category": "优"}})
    ctx = await node_run("QWeather", {"query": "sys.query", "time_period": "3d"}, query="北京")
    assert ctx.outputs["formalized_content"] == f"{days[0]}\n{days[1]}"
    ctx = await node_run("QWeather", {"query": "sys.query", "type": "indices", "user_type": "paid"}, query="北京")
    assert ctx.outputs["formalized_content"] == "2026-01-01\n运动指数: 较适宜, 天气较好\n洗车指数: 适宜, 无雨"
    assert api.seen("/v7/indices/1d")[0].query["type"] == "0"
    ctx = await node_run("QWeather", {"query": "sys.query", "type": "airquality"}, query="北京")
    assert ctx.outputs["formalized_content"] == str({"aqi": "42", "category": "优"})


async def test_a_qweather_error_code_is_ragflows_explanation(api):
    api.route("GET", "/v2/city/lookup", {"code": "401"})
    observation, error, _ = await agent_call("QWeather", {"web_apikey": "bad"}, {"query": "Nowhere"})
    assert error is None and observation.startswith("**Error** Authentication fails")
    assert api.seen("/v7/weather/now") == []


def test_the_model_is_offered_ragflows_functions():
    assert tool_schema("DeepL").name == "deepl_translate_0"
    assert tool_schema("QWeather").description.startswith("QWeather (和风天气)")


async def test_a_qweather_answer_without_the_data_is_a_clear_error(api):
    api.route("GET", "/v2/city/lookup", lookup)
    api.route("GET", "/v7/weather/now", {"code": "200"})
    observation, error, _ = await agent_call("QWeather", {"web_apikey": "k"}, {"query": "Beijing"})
    assert observation.startswith("Error: ") and "no 'now'" in error
