"""QWeather (和风天气), as RAGFlow's `agent/tools/qweather.py`, over QWeather's GeoAPI and v7 weather API.

1. `GET {geo}/v2/city/lookup?location=<query>&key=<key>` -> the first location's id;
2. by `type`: weather `GET {api}/v7/weather/<time_period>` (now, 3d, 7d, 10d, 15d, 30d), indices
   `GET {api}/v7/indices/1d?type=0`, airquality `GET {api}/v7/air/now`, each with `location`, `key`, `lang`.
`formalized_content` (the observation) is RAGFlow's text: the `now` object, or one line per day, or
"date\\nname: category, text" per index. A QWeather error code in the answer becomes RAGFlow's
"**Error** ..." explanation (the observation, not a failure). Key: the component's `web_apikey` (RAGFlow's
"xxx" counts as none), else QWEATHER_API_KEY. Hosts: TRELLIS_QWEATHER_BASE_URL (GeoAPI, default
https://geoapi.qweather.com); user_type paid: TRELLIS_QWEATHER_API_BASE_URL (https://api.qweather.com),
free: TRELLIS_QWEATHER_DEVAPI_BASE_URL (https://devapi.qweather.com).
"""
from __future__ import annotations

import os
from typing import Any

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool

ERROR_CODES = {
    "204": "The request was successful, but the region you are querying does not have the data you need at this time.",
    "400": "Request error, may contain incorrect request parameters or missing mandatory request parameters.",
    "401": "Authentication fails, possibly using the wrong KEY, wrong digital signature, wrong type of KEY (e.g. using "
           "the SDK's KEY to access the Web API).",
    "402": "Exceeded the number of accesses or the balance is not enough to support continued access to the service, "
           "you can recharge, upgrade the accesses or wait for the accesses to be reset.",
    "403": "No access, may be the binding PackageName, BundleID, domain IP address is inconsistent, or the data that "
           "requires additional payment.",
    "404": "The queried data or region does not exist.",
    "429": "Exceeded the limited QPM (number of accesses per minute), please refer to the QPM description",
    "500": "No response or timeout, interface service abnormality please contact us",
}
LANGS = ("zh", "zh-hant", "en", "de", "es", "fr", "it", "ja", "ko", "ru", "hi", "th", "ar", "pt", "bn", "ms", "nl", "el",
         "la", "sv", "id", "pl", "tr", "cs", "et", "vi", "fil", "fi", "he", "is", "nb")


@register
class QWeather(WebTool):
    component_name = "QWeather"
    service = "QWEATHER"
    base_url = "https://geoapi.qweather.com"
    hosts = {"API": "https://api.qweather.com", "DEVAPI": "https://devapi.qweather.com"}
    meta = {
        "name": "qweather",
        "description": "QWeather (和风天气) looks up the current weather, a multi-day forecast, life indices, or air "
                       "quality for a location using the QWeather API.",
        "parameters": {
            "query": {"type": "string",
                      "description": "The location to look up weather for, e.g. a city name like 'Beijing' or '北京'.",
                      "default": "{sys.query}", "required": True}
        },
    }
    defaults = {"web_apikey": "xxx", "lang": "zh", "type": "weather", "user_type": "free", "time_period": "now"}
    choices = {"type": ("weather", "indices", "airquality"), "user_type": ("free", "paid"), "lang": LANGS,
               "time_period": ("now", "3d", "7d", "10d", "15d", "30d")}

    thought = "Looking up the weather for: {}"

    def web_apikey(self, ctx: NodeContext) -> str:
        key = str(self.params.given("web_apikey") or "").strip()
        if key and key != "xxx":
            return key
        key = os.environ.get("QWEATHER_API_KEY", "").strip()
        if not key:
            raise FieldError(ctx.component_id, "params.web_apikey",
                             "no QWeather key: set it in the component's web_apikey or in QWEATHER_API_KEY")
        return key

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        location = str(self.option(args, "query") or "").strip()
        if not location:
            return ""
        key = self.web_apikey(ctx)
        lookup = _object(ctx, await self.request_json(ctx, "GET", "/v2/city/lookup",
                                                      params={"location": location, "key": key}))
        if str(lookup.get("code")) != "200":
            return _finish(ctx, _error(lookup.get("code")))
        try:
            location_id = str(lookup["location"][0]["id"])
        except (KeyError, IndexError, TypeError):
            return _finish(ctx, _error("404"))
        host = "API" if self.option(args, "user_type") == "paid" else "DEVAPI"
        kind, lang = self.option(args, "type"), self.option(args, "lang")
        query = {"location": location_id, "key": key, "lang": lang}
        if kind == "weather":
            period = self.option(args, "time_period")
            data = _object(ctx, await self.request_json(ctx, "GET", self.endpoint(f"/v7/weather/{period}", host=host),
                                                        params=query))
            if str(data.get("code")) != "200":
                return _finish(ctx, _error(data.get("code")))
            if period == "now":
                return _finish(ctx, str(_field(ctx, data, "now")))
            return _finish(ctx, "\n".join(str(day) for day in _field(ctx, data, "daily")))
        if kind == "indices":
            data = _object(ctx, await self.request_json(ctx, "GET", self.endpoint("/v7/indices/1d", host=host),
                                                        params={"type": "0", **query}))
            if str(data.get("code")) != "200":
                return _finish(ctx, _error(data.get("code")))
            daily = _field(ctx, data, "daily")
            return _finish(ctx, daily[0]["date"] + "\n" + "\n".join(
                f"{i['name']}: {i['category']}, {i['text']}" for i in daily))
        data = _object(ctx, await self.request_json(ctx, "GET", self.endpoint("/v7/air/now", host=host), params=query))
        if str(data.get("code")) != "200":
            return _finish(ctx, _error(data.get("code")))
        return _finish(ctx, str(_field(ctx, data, "now")))


def _object(ctx: NodeContext, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RuntimeError(f"{ctx.component_id}: QWeather answered {str(data)[:200]!r}, not an object")
    return data


def _field(ctx: NodeContext, data: dict[str, Any], key: str) -> Any:
    value = data.get(key)
    if not value:
        raise RuntimeError(f"{ctx.component_id}: QWeather's answer has no '{key}': {str(data)[:200]}")
    return value


def _error(code: Any) -> str:
    return "**Error** " + ERROR_CODES.get(str(code), f"QWeather API returned code {code}.")


def _finish(ctx: NodeContext, content: str) -> str:
    ctx.set_output("formalized_content", content)
    return content
