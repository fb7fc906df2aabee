"""TavilySearch and TavilyExtract, as RAGFlow's `agent/tools/tavily.py`, over Tavily's HTTP API.

TavilySearch: `POST {base}/search` with `Authorization: Bearer <key>` and RAGFlow's params (`search_depth`
basic, `topic` general, `max_results` 6, `days` 14, `include_domains`, `exclude_domains`, `include_answer`;
raw content and images are never asked for, as in RAGFlow). The results become the run's references and
`formalized_content` (the observation); `json` is the result list.
TavilyExtract: `POST {base}/extract` with `urls` (a list, or a comma-separated string), `extract_depth`
basic, `format` markdown; `json` is the result list [{url, raw_content}], which is also the observation.
Key: `params.api_key` or TAVILY_API_KEY. Base URL: TRELLIS_TAVILY_BASE_URL (default https://api.tavily.com).
"""
from __future__ import annotations

from typing import Any

from services.orchestrator.components._fields import FieldError, as_bool
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SEARCHING, WebTool, add_references

_SEARCH_FIELDS = ("search_depth", "topic", "max_results", "days", "include_answer", "include_image_descriptions",
                  "include_domains", "exclude_domains")


class _Tavily(WebTool):
    service = "TAVILY"
    base_url = "https://api.tavily.com"

    def headers(self, ctx: NodeContext) -> dict[str, str]:
        return {"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key(ctx)}"}


@register
class TavilySearch(_Tavily):
    component_name = "TavilySearch"
    meta = {
        "name": "tavily_search",
        "description": """
Tavily is a search engine optimized for LLMs, aimed at efficient, quick and persistent search results.
When searching:
   - Start with specific query which should focus on just a single aspect.
   - Number of keywords in query should be less than 5.
   - Broaden search terms if needed
   - Cross-reference information from multiple sources
             """,
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with Tavily. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            },
            "topic": {
                "type": "string",
                "description": "default:general. The category of the search.news is useful for retrieving real-time "
                               "updates, particularly about politics, sports, and major current events covered by "
                               "mainstream media sources. general is for broader, more general-purpose searches that "
                               "may include a wide range of sources.",
                "enum": ["general", "news"],
                "default": "general",
                "required": False,
            },
            "include_domains": {
                "type": "array",
                "description": "default:[]. A list of domains only from which the search results can be included.",
                "default": [],
                "items": {"type": "string", "description": "Domain name that must be included, e.g. www.yahoo.com"},
                "required": False,
            },
            "exclude_domains": {
                "type": "array",
                "description": "default:[]. A list of domains from which the search results can not be included",
                "default": [],
                "items": {"type": "string", "description": "Domain name that must be excluded, e.g. www.yahoo.com"},
                "required": False,
            },
        },
    }
    defaults = {"api_key": "", "search_depth": "basic", "max_results": 6, "days": 14, "include_answer": False,
                "include_raw_content": False, "include_images": False, "include_image_descriptions": False}
    choices = {"topic": ("general", "news"), "search_depth": ("basic", "advanced")}
    positive = ("max_results", "days")

    thought = SEARCHING

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        body: dict[str, Any] = {"query": query}
        for name in _SEARCH_FIELDS:
            value = self.option(args, name)
            if name in ("max_results", "days"):
                value = int(float(value))
            elif name in ("include_answer", "include_image_descriptions"):
                value = as_bool(value)
            elif name.endswith("_domains"):
                value = _string_list(ctx, name, value)
            body[name] = value
        body["include_images"] = False  # RAGFlow never asks for images or raw content
        body["include_raw_content"] = False
        data = await self.request_json(ctx, "POST", "/search", json=body, headers=self.headers(ctx))
        results = _results(ctx, data)
        add_references(ctx, results, title=lambda r: r.get("title"), url=lambda r: r.get("url"),
                       content=lambda r: r.get("raw_content") or r.get("content"), score=lambda r: r.get("score"))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))


@register
class TavilyExtract(_Tavily):
    component_name = "TavilyExtract"
    timeout_s = 60.0
    meta = {
        "name": "tavily_extract",
        "description": "Extract web page content from one or more specified URLs using Tavily Extract.",
        "parameters": {
            "urls": {
                "type": "array",
                "description": "The URLs to extract content from.",
                "default": "",
                "items": {"type": "string", "description": "The URL to extract content from, e.g. www.yahoo.com"},
                "required": True,
            },
            "extract_depth": {
                "type": "string",
                "description": "The depth of the extraction process. advanced extraction retrieves more data, "
                               "including tables and embedded content, with higher success but may increase "
                               "latency.basic extraction costs 1 credit per 5 successful URL extractions, while "
                               "advanced extraction costs 2 credits per 5 successful URL extractions.",
                "enum": ["basic", "advanced"],
                "default": "basic",
                "required": False,
            },
            "format": {
                "type": "string",
                "description": "The format of the extracted web page content. markdown returns content in markdown "
                               "format. text returns plain text and may increase latency.",
                "enum": ["markdown", "text"],
                "default": "markdown",
                "required": False,
            },
        },
    }
    defaults = {"api_key": "", "extract_depth": "basic", "urls": [], "format": "markdown", "include_images": False}
    choices = {"extract_depth": ("basic", "advanced"), "format": ("markdown", "text")}

    thought, thought_arg = "Opened {}—pulling out the main text…", "urls"

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> list[dict[str, Any]]:
        urls = self.option(args, "urls")
        urls = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else urls
        urls = [u for u in _string_list(ctx, "urls", urls) if u]
        ctx.set_output("json", [])
        if not urls:
            raise FieldError(ctx.component_id, "urls", "no URL to extract")
        body = {"urls": urls, "extract_depth": self.option(args, "extract_depth"),
                "format": self.option(args, "format"), "include_images": False}
        data = await self.request_json(ctx, "POST", "/extract", json=body, headers=self.headers(ctx))
        results = _results(ctx, data)
        ctx.set_output("json", results)
        return results


def _string_list(ctx: NodeContext, name: str, value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise FieldError(ctx.component_id, name, f"must be a list of strings, got {value!r}")
    return [str(v) for v in value]


def _results(ctx: NodeContext, data: Any) -> list[dict[str, Any]]:
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise RuntimeError(f"{ctx.component_id}: Tavily's answer has no 'results' list: {str(data)[:200]}")
    return [r for r in results if isinstance(r, dict)]
