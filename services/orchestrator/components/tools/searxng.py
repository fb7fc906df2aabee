"""SearXNG, as RAGFlow's `agent/tools/searxng.py`, over a SearXNG instance's JSON search API.

`GET {instance}/search?q=...&format=json&categories=general&language=auto&safesearch=1&pageno=1`; the
first `top_n` (10) results become the run's references and `formalized_content` (the observation);
`json` is that result list. The instance is the component's `searxng_url` (RAGFlow's param, which the
model may also pass), else TRELLIS_SEARXNG_BASE_URL. A self-hosted instance on a private network must be
in TRELLIS_SSRF_ALLOWLIST. No key.
"""
from __future__ import annotations

import os
from typing import Any

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool, add_references


@register
class SearXNG(WebTool):
    component_name = "SearXNG"
    service = "SEARXNG"
    needs_key = False
    meta = {
        "name": "searxng_search",
        "description": "SearXNG is a privacy-focused metasearch engine that aggregates results from multiple search "
                       "engines without tracking users. It provides comprehensive web search capabilities.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with SearXNG. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            },
            "searxng_url": {
                "type": "string",
                "description": "The base URL of your SearXNG instance (e.g., http://localhost:4000). This is required "
                               "to connect to your SearXNG server.",
                "required": False,
                "default": "",
            },
        },
    }
    defaults = {"top_n": 10}
    positive = ("top_n",)

    thought = "\nKeywords: {}\nSearching with SearXNG for relevant results...\n"

    def instance(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        """RAGFlow's order: the DSL's searxng_url, else the model's; then the environment."""
        url = str(self.params.given("searxng_url") or args.get("searxng_url") or "").strip()
        url = url or os.environ.get("TRELLIS_SEARXNG_BASE_URL", "").strip()
        if not url:
            raise FieldError(ctx.component_id, "params.searxng_url",
                             "no SearXNG instance: set the component's searxng_url or TRELLIS_SEARXNG_BASE_URL")
        return url.rstrip("/")

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        params = {"q": query, "format": "json", "categories": "general", "language": "auto", "safesearch": "1",
                  "pageno": "1"}
        data = await self.request_json(ctx, "GET", self.instance(ctx, args) + "/search", params=params)
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise RuntimeError(f"{ctx.component_id}: SearXNG's answer has no 'results' list: {str(data)[:200]}")
        results = [r for r in results if isinstance(r, dict)][: int(float(self.option(args, "top_n")))]
        add_references(ctx, results, title=lambda r: r.get("title", ""), url=lambda r: r.get("url", ""),
                       content=lambda r: r.get("content", ""))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))
