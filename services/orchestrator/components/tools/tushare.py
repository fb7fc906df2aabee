"""TuShare, RAGFlow's `agent/tools/tushare.py`: financial quick news from the TuShare Pro API, filtered by
a keyword.

RAGFlow still ships it as a pre-0.20 component (no tool meta; its current engine no longer runs it): it
reads its keyword from `keyword`, else the upstream text. Here it runs as a canvas node whose `keyword`
param (RAGFlow's, default "") may be text, a reference (`sys.query`, `cpn@content`) or `{ref}` text,
falling back to `sys.query`; as an Agent tool the model passes `keyword`.

`POST {base}` with `{"api_name": "news", "token": <token>, "params": {"src", "start_date", "end_date"}}` ->
`{"code": 0, "msg", "data": {"fields": [...], "items": [[...]]}}`. The news whose `content` contains the
keyword (case-insensitive) become a Markdown table (RAGFlow's `DataFrame.to_markdown`: index column first):
the `content` output and the observation (`formalized_content`); a non-zero `code` makes TuShare's `msg`
the content, as RAGFlow does. Params: token (RAGFlow's "xxx" counts as none; else TUSHARE_API_KEY), src
eastmoney (sina, wallstreetcn, 10jqka, eastmoney, yuncaijing, fenghuang, jinrongjie), start_date
"2024-01-01 09:00:00", end_date now. Base URL: TRELLIS_TUSHARE_BASE_URL (default http://api.tushare.pro,
TuShare's only endpoint).
"""
from __future__ import annotations

import os
import time
from typing import Any

from tabulate import tabulate

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool

SOURCES = ("sina", "wallstreetcn", "10jqka", "eastmoney", "yuncaijing", "fenghuang", "jinrongjie")


@register
class TuShare(WebTool):
    component_name = "TuShare"
    service = "TUSHARE"
    base_url = "http://api.tushare.pro"
    exception_output = "content"
    # RAGFlow gives TuShare no tool meta; this one lets an Agent pass the keyword.
    meta = {
        "name": "tushare_news",
        "description": "TuShare returns financial quick news (sina, wallstreetcn, 10jqka, eastmoney...) whose "
                       "content contains a keyword, as a Markdown table.",
        "parameters": {
            "keyword": {"type": "string", "description": "The keyword the news must contain.",
                        "default": "", "required": True}
        },
    }
    defaults = {"token": "xxx", "src": "eastmoney", "start_date": "2024-01-01 09:00:00", "end_date": ""}
    choices = {"src": SOURCES}

    def thoughts(self, ctx: NodeContext) -> str:
        return f"Fetching {self.params.src} quick news about `{self.shown(ctx, 'keyword')}`."

    def token(self, ctx: NodeContext) -> str:
        token = str(self.params.given("token") or "").strip()
        if token and token != "xxx":
            return token
        token = os.environ.get("TUSHARE_API_KEY", "").strip()
        if not token:
            raise FieldError(ctx.component_id, "params.token",
                             "no TuShare token: set it in the component's token or in TUSHARE_API_KEY")
        return token

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        keyword = str(self.option(args, "keyword") or ctx.get_global("sys.query") or "").strip()
        ctx.set_output("content", "")
        if not keyword:
            return ""
        end = str(self.option(args, "end_date") or "") or time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        body = {"api_name": "news", "token": self.token(ctx),
                "params": {"src": self.option(args, "src"), "start_date": str(self.option(args, "start_date")),
                           "end_date": end}}
        data = await self.request_json(ctx, "POST", "", json=body)
        if not isinstance(data, dict):
            raise RuntimeError(f"{ctx.component_id}: TuShare answered {str(data)[:200]!r}, not an object")
        if data.get("code") != 0:
            return _finish(ctx, str(data.get("msg") or f"TuShare code {data.get('code')}"))
        try:
            fields, items = list(data["data"]["fields"]), list(data["data"]["items"])
            column = fields.index("content")
        except (KeyError, TypeError, ValueError):
            raise RuntimeError(f"{ctx.component_id}: TuShare's answer has no news table with a content "
                               f"field: {str(data)[:200]}") from None
        wanted = keyword.lower()
        rows = [[i, *row] for i, row in enumerate(items)
                if isinstance(row, list) and wanted in str(row[column] or "").lower()]
        return _finish(ctx, tabulate(rows, headers=["", *fields], tablefmt="pipe", missingval=""))


def _finish(ctx: NodeContext, content: str) -> str:
    ctx.set_output("content", content)
    ctx.set_output("formalized_content", content)
    return content
