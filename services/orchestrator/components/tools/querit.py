"""QueritSearch and QueritContents, as RAGFlow's `agent/tools/querit.py`, over Querit's HTTP API.

QueritSearch: `POST {base}/v1/search` with `Authorization: Bearer <key>` and `{"query", "count",
"chunksPerDoc"?, "filters"?: {"sites": {"include", "exclude"}, "timeRange": {"date"}, "geo": {"countries":
{"include"}}, "languages": {"include"}}}`. The results (`results.result[]`: title, url, snippet) become the
run's references and `formalized_content` (the observation); `json` is Querit's whole answer.
QueritContents: `POST {base}/v1/contents` with `{"urls" (1-10), "format", "crawlTimeout", "extrasMeta"}`;
`json` is Querit's answer, which is also the observation. Arguments are checked as RAGFlow checks them.
Key: the component's `api_key`, else QUERIT_API_KEY. Base URL: TRELLIS_QUERIT_BASE_URL (default
https://api.querit.ai).
"""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool, add_references

_TIME_RANGE = re.compile(r"^([dwmy][1-9][0-9]*|\d{4}-\d{2}-\d{2}to\d{4}-\d{2}-\d{2})$")
_LISTS = ("site_include", "site_exclude", "country_include", "language_include")


class _Querit(WebTool):
    service = "QUERIT"
    base_url = "https://api.querit.ai"

    def headers(self, ctx: NodeContext) -> dict[str, str]:
        return {"Accept": "application/json", "Authorization": f"Bearer {self.api_key(ctx)}",
                "Content-Type": "application/json"}


def _list(name: str) -> dict[str, Any]:
    return {"type": "array", "default": [], "items": {"type": "string"}, "required": False,
            "description": {"site_include": "Sites that search results must include.",
                            "site_exclude": "Sites that search results must exclude.",
                            "country_include": "Return results associated with the specified countries.",
                            "language_include": "Languages that search results must include."}[name]}


@register
class QueritSearch(_Querit):
    component_name = "QueritSearch"
    meta = {
        "name": "querit_search",
        "description": "Search the live web with Querit and return the complete Querit API response.",
        "parameters": {
            "query": {"type": "string", "description": "The search query to execute with Querit.",
                      "default": "{sys.query}", "required": True},
            "count": {"type": "integer", "description": "The maximum number of results to return. Defaults to 10.",
                      "default": 10, "required": False},
            "chunks_per_doc": {"type": "integer",
                               "description": "The number of summary chunks per document. Supports values from 1 to 3.",
                               "default": 3, "required": False},
            "site_include": _list("site_include"),
            "site_exclude": _list("site_exclude"),
            "time_range": {"type": "string",
                           "description": "A Querit time range such as d7, w1, m3, y1, or YYYY-MM-DDtoYYYY-MM-DD.",
                           "default": "", "required": False},
            "country_include": _list("country_include"),
            "language_include": _list("language_include"),
        },
    }
    defaults = {"api_key": ""}

    thought = "Searching Querit for `{}`."

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = self.option(args, "query")
        ctx.set_output("json", {})
        if not isinstance(query, str):
            raise FieldError(ctx.component_id, "query", "Querit query must be a string.")
        if not query:
            return ""
        body = self.payload(ctx, query, args)
        data = await self.request_json(ctx, "POST", "/v1/search", json=body, headers=self.headers(ctx))
        container = data.get("results", {}) if isinstance(data, dict) else None
        results = container.get("result", []) if isinstance(container, dict) else None
        if not isinstance(results, list):
            raise RuntimeError(f"{ctx.component_id}: Querit's answer has no results.result list: {str(data)[:200]}")
        add_references(ctx, [r for r in results if isinstance(r, dict)], title=lambda r: _text(r.get("title")),
                       url=lambda r: _text(r.get("url")), content=lambda r: _text(r.get("snippet")))
        ctx.set_output("json", data)
        return str(ctx.output("formalized_content"))

    def payload(self, ctx: NodeContext, query: str, args: dict[str, Any]) -> dict[str, Any]:
        """RAGFlow's `_build_payload`, after its checks of each argument."""
        cid = ctx.component_id
        count = _integer(cid, "count", self.option(args, "count"))
        if count < 1:
            raise FieldError(cid, "count", "Querit count must be an integer greater than or equal to 1.")
        chunks = self.option(args, "chunks_per_doc")
        chunks = None if chunks is None else _integer(cid, "chunks_per_doc", chunks)
        if chunks is not None and not 1 <= chunks <= 3:
            raise FieldError(cid, "chunks_per_doc", "Querit chunks_per_doc must be an integer from 1 to 3.")
        time_range = self.option(args, "time_range") or ""
        if not isinstance(time_range, str) or (time_range and not _TIME_RANGE.fullmatch(time_range)):
            raise FieldError(cid, "time_range", "Querit time_range must use dN, wN, mN, yN, or YYYY-MM-DDtoYYYY-MM-DD.")
        lists = {}
        for name in _LISTS:
            value = self.option(args, name) or []
            if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
                raise FieldError(cid, name, f"Querit {name} must be an array of strings.")
            lists[name] = value
        body: dict[str, Any] = {"query": query, "count": count}
        if chunks is not None:
            body["chunksPerDoc"] = chunks
        filters: dict[str, Any] = {}
        if lists["site_include"] or lists["site_exclude"]:
            filters["sites"] = {k: lists[f"site_{k}"] for k in ("include", "exclude") if lists[f"site_{k}"]}
        if time_range:
            filters["timeRange"] = {"date": time_range}
        if lists["country_include"]:
            filters["geo"] = {"countries": {"include": lists["country_include"]}}
        if lists["language_include"]:
            filters["languages"] = {"include": lists["language_include"]}
        if filters:
            body["filters"] = filters
        return body


@register
class QueritContents(_Querit):
    component_name = "QueritContents"
    timeout_s = 70.0
    meta = {
        "name": "querit_contents",
        "description": "Crawl one or more web pages with Querit and return their contents.",
        "parameters": {
            "urls": {"type": "array", "description": "The absolute HTTP or HTTPS URLs to crawl. Supports 1 to 10 URLs.",
                     "default": [], "items": {"type": "string"}, "required": True},
            "format": {"type": "string", "description": "Content format: text, markdown, or html. Defaults to markdown.",
                       "enum": ["text", "markdown", "html"], "default": "markdown", "required": False},
            "crawl_timeout": {"type": "integer",
                              "description": "Per-page crawl timeout in seconds. Must be between 1 and 60.",
                              "default": 10, "required": False},
            "extras_meta": {"type": "boolean", "description": "Whether to include page metadata in each result.",
                            "default": False, "required": False},
        },
    }
    defaults = {"api_key": ""}
    choices = {"format": ("text", "markdown", "html")}

    thought = "Reading web page contents with Querit."

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> Any:
        cid = ctx.component_id
        urls = self.option(args, "urls")
        if isinstance(urls, str):
            urls = [u.strip() for u in urls.split(",") if u.strip()]
        if not isinstance(urls, list) or not 1 <= len(urls) <= 10 or any(
                not isinstance(u, str) or not u.strip() for u in urls):
            raise FieldError(cid, "urls", "Querit urls must contain between 1 and 10 non-empty strings.")
        if any(urlparse(u).scheme not in ("http", "https") or not urlparse(u).netloc for u in urls):
            raise FieldError(cid, "urls", "Querit urls must be absolute HTTP or HTTPS URLs.")
        fmt = self.option(args, "format")
        if fmt not in ("text", "markdown", "html"):
            raise FieldError(cid, "format", "Querit format must be text, markdown, or html.")
        crawl_timeout = _integer(cid, "crawl_timeout", self.option(args, "crawl_timeout"))
        if not 1 <= crawl_timeout <= 60:
            raise FieldError(cid, "crawl_timeout", "Querit crawl_timeout must be an integer from 1 to 60.")
        extras = self.option(args, "extras_meta")
        if not isinstance(extras, bool):
            raise FieldError(cid, "extras_meta", "Querit extras_meta must be a boolean.")
        body = {"urls": urls, "format": fmt, "crawlTimeout": crawl_timeout, "extrasMeta": extras}
        data = await self.request_json(ctx, "POST", "/v1/contents", json=body, headers=self.headers(ctx))
        if not isinstance(data, dict) or any(k in data and not isinstance(data[k], list) for k in ("results", "statuses")):
            raise RuntimeError(f"{cid}: Querit's contents answer is not an object with results/statuses arrays: "
                               f"{str(data)[:200]}")
        ctx.set_output("json", data)
        return data


def _integer(cid: str, name: str, value: Any) -> int:
    """An integer argument; a model may send "5" for 5."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
        raise FieldError(cid, name, f"Querit {name} must be an integer, got {value!r}")
    return int(value)


def _text(value: Any) -> str:
    return "" if value is None else str(value)
