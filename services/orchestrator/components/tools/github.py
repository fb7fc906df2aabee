"""GitHub, as RAGFlow's `agent/tools/github.py`, over GitHub's repository search API.

`GET {base}/search/repositories?q=...&sort=stars&order=desc&per_page=<top_n>` (top_n 10) with RAGFlow's
headers; each repository (name, html_url, "description\\n stars:watchers") becomes a reference and a block
of `formalized_content` (the observation); `json` is the item list. RAGFlow calls it without a key; a
token in the component's `api_key` or GITHUB_API_KEY is sent as `Authorization: Bearer` (higher rate
limits). Base URL: TRELLIS_GITHUB_BASE_URL (default https://api.github.com, a GitHub Enterprise API too).
"""
from __future__ import annotations

from typing import Any

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool, add_references


@register
class GitHub(WebTool):
    component_name = "GitHub"
    service = "GITHUB"
    base_url = "https://api.github.com"
    needs_key = False
    meta = {
        "name": "github_search",
        "description": "GitHub repository search is a feature that enables users to find specific repositories on the "
                       "GitHub platform. This search functionality allows users to locate projects, codebases, and "
                       "other content hosted on GitHub based on various criteria.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with GitHub. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            }
        },
    }
    defaults = {"top_n": 10}
    positive = ("top_n",)

    thought = "Scanning GitHub repos related to `{}`."

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if token := self.api_key(ctx):
            headers["Authorization"] = f"Bearer {token}"
        params = {"q": query, "sort": "stars", "order": "desc", "per_page": str(int(float(self.option(args, "top_n"))))}
        data = await self.request_json(ctx, "GET", "/search/repositories", params=params, headers=headers)
        items = data.get("items") if isinstance(data, dict) else None
        if not isinstance(items, list):  # GitHub reports rate limits and bad queries in "message"
            message = data.get("message") if isinstance(data, dict) else None
            raise RuntimeError(f"{ctx.component_id}: GitHub: {message or 'GitHub search returned no items.'}")
        items = [i for i in items if isinstance(i, dict)]
        add_references(ctx, items, title=lambda r: r.get("name"), url=lambda r: r.get("html_url"),
                       content=lambda r: f"{r.get('description')}\n stars:{r.get('watchers')}")
        ctx.set_output("json", items)
        return str(ctx.output("formalized_content"))
