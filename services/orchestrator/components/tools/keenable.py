"""KeenableSearch, as RAGFlow's `agent/tools/keenable.py`: a web search API for agents, keyless by default.

`POST {base}/v1/search/public` (no key) or `POST {base}/v1/search` with `X-API-Key` (the component's
`api_key`, else KEENABLE_API_KEY), body `{"query", "mode": pro | realtime, "site"?}` and RAGFlow's
`User-Agent: keenable-ragflow`, `X-Keenable-Title: RAGFlow`. The first `top_n` (10) results become the
run's references and `formalized_content` (content: `snippet`, else `description`, whitespace collapsed);
`json` is that list. `realtime` needs a key. Base URL: TRELLIS_KEENABLE_BASE_URL (default
https://api.keenable.ai).
"""
from __future__ import annotations

from typing import Any

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SEARCHING, WebTool, add_references


@register
class KeenableSearch(WebTool):
    component_name = "KeenableSearch"
    service = "KEENABLE"
    base_url = "https://api.keenable.ai"
    needs_key = False
    meta = {
        "name": "keenable_search",
        "description": """
Keenable is a web search API built for AI agents. It returns fresh, relevant web
results for a query and works without an API key by default (keyless free tier).
When searching:
   - Use a focused query of the most important terms (and synonyms).
   - Optionally restrict to a single site/domain.
             """,
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with Keenable. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            },
            "site": {
                "type": "string",
                "description": "default:''. Restrict results to a single domain, e.g. 'techcrunch.com'.",
                "default": "",
                "required": False,
            },
        },
    }
    defaults = {"api_key": "", "mode": "pro", "top_n": 10}
    choices = {"mode": ("pro", "realtime")}
    positive = ("top_n",)

    thought = SEARCHING

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        mode = self.option(args, "mode")
        key = self.api_key(ctx)
        if mode == "realtime" and not key:
            raise FieldError(ctx.component_id, "params.api_key",
                             "Keenable 'realtime' mode requires an API key (api_key or KEENABLE_API_KEY)")
        body: dict[str, Any] = {"query": query, "mode": mode}
        if site := str(self.option(args, "site") or "").strip():
            body["site"] = site
        headers = {"User-Agent": "keenable-ragflow", "X-Keenable-Title": "RAGFlow"}
        if key:
            headers["X-API-Key"] = key
        data = await self.request_json(ctx, "POST", "/v1/search" if key else "/v1/search/public", json=body,
                                       headers=headers)
        results = (data.get("results") if isinstance(data, dict) else None) or []
        results = [r for r in results if isinstance(r, dict)][: int(float(self.option(args, "top_n")))]
        add_references(ctx, results, title=lambda r: r.get("title"), url=lambda r: r.get("url"),
                       content=lambda r: " ".join(str(r.get("snippet") or r.get("description") or "").split()))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))
