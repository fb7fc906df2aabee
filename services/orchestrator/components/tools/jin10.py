"""Jin10, RAGFlow's `agent/tools/jin10.py`: financial data from the Jin10 Open Platform (金十数据).

RAGFlow still ships it as a pre-0.20 component (no tool meta; its current engine no longer runs it). Here
it runs as a canvas node, or as an Agent tool with no required argument (the model may pass `contain`).
Requests, with `secret-key: <secret_key>` and RAGFlow's parameters also sent as a JSON body, by `type`:
- flash: `GET {base}/data-api/flash?category=<flash_type 1-5>` (+ contain, filter) -> one line per item's
  `data.content`;
- calendar: `GET {base}/data-api/calendar/<calendar_datatype data|event|holiday>?category=<cj|qh|hk|us>`;
- symbols: `GET {base}/data-api/<symbols_datatype symbols|quotes>?type=<GOODS|FOREX|FUTURE|CRYPTO>` (quotes:
  codes BTCUSD, as RAGFlow), RAGFlow's column names (c -> Commodity Code, p -> Latest Price...);
- news: `GET {base}/data-api/news` (+ contain, filter).
Tables are Markdown (RAGFlow's `DataFrame.to_markdown`). The text is the `content` output and the
observation. Key: `secret_key` (RAGFlow's "xxx" counts as none), else JIN10_API_KEY. Base URL:
TRELLIS_JIN10_BASE_URL (default https://open-data-api.jin10.com).
"""
from __future__ import annotations

import os
from typing import Any

from tabulate import tabulate

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool

_SYMBOLS = {"c": "Commodity Code", "e": "Stock Exchange", "n": "Commodity Name", "t": "Commodity Type"}
_QUOTES = {"a": "Selling Price", "b": "Buying Price", "c": "Commodity Code", "e": "Stock Exchange",
           "h": "Highest Price", "hc": "Yesterday’s Closing Price", "l": "Lowest Price", "o": "Opening Price",
           "p": "Latest Price", "t": "Market Quote Time"}


@register
class Jin10(WebTool):
    component_name = "Jin10"
    service = "JIN10"
    base_url = "https://open-data-api.jin10.com"
    exception_output = "content"
    # RAGFlow gives Jin10 no tool meta; this one lets an Agent call it.
    meta = {
        "name": "jin10",
        "description": "Jin10 (金十数据) returns financial flash news, economic calendars, commodity symbols and "
                       "quotes, or news from the Jin10 Open Platform, as configured in the component.",
        "parameters": {
            "contain": {"type": "string", "description": "Only flash news or news containing this text.",
                        "default": "", "required": False}
        },
    }
    defaults = {"type": "flash", "secret_key": "xxx", "flash_type": "1", "calendar_type": "cj",
                "calendar_datatype": "data", "symbols_type": "GOODS", "symbols_datatype": "symbols", "filter": ""}
    choices = {"type": ("flash", "calendar", "symbols", "news"), "flash_type": ("1", "2", "3", "4", "5"),
               "calendar_type": ("cj", "qh", "hk", "us"), "calendar_datatype": ("data", "event", "holiday"),
               "symbols_type": ("GOODS", "FOREX", "FUTURE", "CRYPTO"), "symbols_datatype": ("symbols", "quotes")}

    def thoughts(self, ctx: NodeContext) -> str:
        return f"Fetching Jin10 {self.params.type} data..."

    def secret(self, ctx: NodeContext) -> str:
        key = str(self.params.given("secret_key") or "").strip()
        if key and key != "xxx":
            return key
        key = os.environ.get("JIN10_API_KEY", "").strip()
        if not key:
            raise FieldError(ctx.component_id, "params.secret_key",
                             "no Jin10 key: set it in the component's secret_key or in JIN10_API_KEY")
        return key

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        headers = {"secret-key": self.secret(ctx)}
        kind = self.option(args, "type")
        contain, filt = str(self.option(args, "contain") or ""), str(self.option(args, "filter") or "")
        if kind == "flash":
            category = str(self.option(args, "flash_type"))
            data = await self._data(ctx, "/data-api/flash", {"category": category}, headers,
                                    {"category": category, "contain": contain, "filter": filt})
            text = "\n".join(str((item.get("data") or {}).get("content", "")) for item in data
                             if isinstance(item, dict))
        elif kind == "calendar":
            category = str(self.option(args, "calendar_type"))
            data = await self._data(ctx, f"/data-api/calendar/{self.option(args, 'calendar_datatype')}",
                                    {"category": category}, headers, {"category": category})
            text = _markdown(data)
        elif kind == "symbols":
            datatype, kind_of = str(self.option(args, "symbols_datatype")), str(self.option(args, "symbols_type"))
            body = {"type": kind_of, **({"codes": "BTCUSD"} if datatype == "quotes" else {})}
            data = await self._data(ctx, f"/data-api/{datatype}", {"type": kind_of}, headers, body)
            names = _QUOTES if datatype == "quotes" else _SYMBOLS
            text = _markdown([{names.get(k, k): v for k, v in row.items()} for row in data if isinstance(row, dict)])
        else:
            data = await self._data(ctx, "/data-api/news", None, headers, {"contain": contain, "filter": filt})
            text = _markdown(data)
        ctx.set_output("content", text)
        ctx.set_output("formalized_content", text)
        return text

    async def _data(self, ctx: NodeContext, path: str, query: dict[str, str] | None, headers: dict[str, str],
                    body: dict[str, Any]) -> list[Any]:
        answer = await self.request_json(ctx, "GET", path, params=query, headers=headers, json=body)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise RuntimeError(f"{ctx.component_id}: Jin10's answer has no data list: {str(answer)[:200]}")
        return data


def _markdown(rows: list[Any]) -> str:
    """A list of records as pandas' `DataFrame(rows).to_markdown()` writes it (index column first)."""
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return ""
    return tabulate(rows, headers="keys", tablefmt="pipe", showindex=True, missingval="")
