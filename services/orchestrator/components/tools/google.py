"""Google, as RAGFlow's `agent/tools/google.py`: Google results through SerpApi's HTTP API.

`GET {base}/search.json?engine=google&q=..&google_domain=google.com&gl=<country>&hl=<language>&api_key=..`
(plus `start` and `num` when the model gives them). `organic_results` become the run's references and
`formalized_content` (the observation); `json` is the list. SerpApi reports a bad key or an exhausted
quota in an `error` field: that message is the error.
Key: `params.api_key` or SERPAPI_API_KEY. Base URL: TRELLIS_SERPAPI_BASE_URL (default https://serpapi.com).
"""
from __future__ import annotations

from typing import Any

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SEARCHING, WebTool, add_references


@register
class Google(WebTool):
    component_name = "Google"
    service = "SERPAPI"
    base_url = "https://serpapi.com"
    meta = {
        "name": "google_search",
        "description": "Search the world's information, including webpages, images, videos and more. Google has "
                       "many special features to help you find exactly what you're looking ...",
        "parameters": {
            "q": {
                "type": "string",
                "description": "The search keywords to execute with Google. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            },
            "start": {
                "type": "integer",
                "description": "Parameter defines the result offset. It skips the given number of results. It's used "
                               "for pagination. (e.g., 0 (default) is the first page of results, 10 is the 2nd page "
                               "of results, 20 is the 3rd page of results, etc.). Google Local Results only accepts "
                               "multiples of 20(e.g. 20 for the second page results, 40 for the third page results, "
                               "etc.) as the `start` value.",
                "default": "0",
                "required": False,
            },
            "num": {
                "type": "integer",
                "description": "Parameter defines the maximum number of results to return. (e.g., 10 (default) "
                               "returns 10 results, 40 returns 40 results, and 100 returns 100 results). The use of "
                               "num may introduce latency, and/or prevent the inclusion of specialized result types. "
                               "It is better to omit this parameter unless it is strictly necessary to increase the "
                               "number of results per page. Results are not guaranteed to have the number of results "
                               "specified in num.",
                "default": "6",
                "required": False,
            },
        },
    }
    defaults = {"start": 0, "num": 6, "api_key": "", "country": "cn", "language": "en"}

    thought, thought_arg = SEARCHING, "q"

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "q") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        params = {"engine": "google", "q": query, "google_domain": "google.com",
                  "gl": str(self.option(args, "country")), "hl": str(self.option(args, "language")),
                  "start": int(float(self.option(args, "start") or 0)),
                  "num": int(float(self.option(args, "num") or 6)), "api_key": self.api_key(ctx)}
        data = await self.request_json(ctx, "GET", "/search.json", params=params)
        if not isinstance(data, dict) or "organic_results" not in data:
            error = data.get("error") if isinstance(data, dict) else None
            raise RuntimeError(f"{ctx.component_id}: SerpApi: {error or 'no organic_results in the answer'}")
        results = [r for r in data["organic_results"] if isinstance(r, dict)]
        add_references(ctx, results, title=lambda r: r.get("title", ""), url=lambda r: r.get("link", ""),
                       content=lambda r: (r.get("about_this_result") or {}).get("source", {}).get("description")
                       or r.get("snippet", ""))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))
