"""Bing, RAGFlow's web and news search component (older templates use it), over the Bing Search v7 API.

`GET {base}/v7.0/search` (channel "Webpages") or `{base}/v7.0/news/search` (channel "News") with
`q`, `textDecorations`, `textFormat` HTML, `cc` <country>, `answerCount` 1, `promote` <channel>, `count`
<top_n>, the key in `Ocp-Apim-Subscription-Key` and `Accept-Language` <language>, as RAGFlow sent them.
Results (`webPages.value` or `news.value`, each {name, url, snippet|description}) become the run's
references and `formalized_content` (the observation); `json` is the list.
RAGFlow gives Bing no tool description of its own; the model sees `bing_search(query)` described below.
Key: `params.api_key` or BING_API_KEY. Base URL: TRELLIS_BING_BASE_URL (default https://api.bing.microsoft.com).
"""
from __future__ import annotations

import re
from typing import Any

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool, add_references

_TAGS = re.compile(r"</?b>")


@register
class Bing(WebTool):
    component_name = "Bing"
    service = "BING"
    base_url = "https://api.bing.microsoft.com"
    meta = {
        "name": "bing_search",
        "description": "Bing is a web search engine. It searches web pages (or news, as configured) and returns "
                       "their titles, links and snippets.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with Bing. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            },
        },
    }
    defaults = {"top_n": 10, "channel": "Webpages", "api_key": "", "country": "CN", "language": "en"}
    choices = {"channel": ("Webpages", "News")}
    positive = ("top_n",)

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        channel = self.option(args, "channel")
        headers = {"Ocp-Apim-Subscription-Key": self.api_key(ctx), "Accept-Language": str(self.option(args, "language"))}
        params = {"q": query, "textDecorations": "true", "textFormat": "HTML", "cc": str(self.option(args, "country")),
                  "answerCount": 1, "promote": channel, "count": int(float(self.option(args, "top_n")))}
        news = channel == "News"
        data = await self.request_json(ctx, "GET", "/v7.0/news/search" if news else "/v7.0/search",
                                       params=params, headers=headers)
        block = data.get("news" if news else "webPages") if isinstance(data, dict) else None
        results = [r for r in (block or {}).get("value") or [] if isinstance(r, dict)]
        add_references(ctx, results, title=lambda r: _TAGS.sub("", str(r.get("name", ""))), url=lambda r: r.get("url"),
                       content=lambda r: _TAGS.sub("", str(r.get("description" if news else "snippet") or "")))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))
