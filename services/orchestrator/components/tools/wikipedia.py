"""Wikipedia, as RAGFlow's `agent/tools/wikipedia.py`, over the MediaWiki API its library reads.

One request: `GET {base}/w/api.php?action=query&format=json&generator=search&gsrsearch=<query>&gsrlimit=<top_n>
&prop=extracts|info|pageprops&exintro=1&explaintext=1&exlimit=max&inprop=url&ppprop=disambiguation&redirects=1`:
the pages matching the query with their introduction as plain text (the library's `summary`) and their
URL. Disambiguation pages are left out, as RAGFlow does. The pages, in search order, become the run's
references and `formalized_content` (the observation); `json` is [{title, url, summary}].
No key. Base URL: TRELLIS_WIKIPEDIA_BASE_URL (default https://{language}.wikipedia.org; `{language}` is
filled from the `language` param, "en" by default).
"""
from __future__ import annotations

from typing import Any

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SEARCHING, WebTool, add_references

LANGUAGES = ("af", "pl", "ar", "ast", "az", "bg", "nan", "bn", "be", "ca", "cs", "cy", "da", "de", "et", "el",
             "en", "es", "eo", "eu", "fa", "fr", "gl", "ko", "hy", "hi", "hr", "id", "it", "he", "ka", "lld", "la",
             "lv", "lt", "hu", "mk", "arz", "ms", "min", "my", "nl", "ja", "nb", "nn", "ce", "uz", "pt", "kk",
             "ro", "ru", "ceb", "sk", "sl", "sr", "sh", "fi", "sv", "ta", "tt", "th", "tg", "azb", "tr", "uk",
             "ur", "vi", "war", "zh", "yue")


@register
class Wikipedia(WebTool):
    component_name = "Wikipedia"
    service = "WIKIPEDIA"
    base_url = "https://{language}.wikipedia.org"
    timeout_s = 60.0
    needs_key = False
    meta = {
        "name": "wikipedia_search",
        "description": "A wide range of how-to and information pages are made available in wikipedia. Since 2001, "
                       "it has grown rapidly to become the world's largest reference website. From Wikipedia, the "
                       "free encyclopedia.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keyword to execute with wikipedia. The keyword MUST be a specific subject "
                               "that can match the title.",
                "default": "{sys.query}",
                "required": True,
            }
        },
    }
    defaults = {"top_n": 10, "language": "en"}
    choices = {"language": LANGUAGES}
    positive = ("top_n",)

    thought = SEARCHING

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        url = self.endpoint("/w/api.php", language=str(self.option(args, "language")))
        data = await self.request_json(ctx, "GET", url, params={
            "action": "query", "format": "json", "generator": "search", "gsrsearch": query,
            "gsrlimit": int(float(self.option(args, "top_n"))), "prop": "extracts|info|pageprops", "exintro": 1,
            "explaintext": 1, "exlimit": "max", "inprop": "url", "ppprop": "disambiguation", "redirects": 1})
        if isinstance(data, dict) and data.get("error"):
            error = data["error"]
            raise RuntimeError(f"{ctx.component_id}: Wikipedia: {error.get('info') if isinstance(error, dict) else error}")
        pages = ((data.get("query") or {}).get("pages") or {}) if isinstance(data, dict) else {}
        pages = pages.values() if isinstance(pages, dict) else pages
        found = sorted((p for p in pages if isinstance(p, dict) and "missing" not in p
                        and "disambiguation" not in (p.get("pageprops") or {})), key=lambda p: p.get("index", 0))
        results = [{"title": p.get("title", ""), "url": p.get("fullurl", ""), "summary": p.get("extract", "")}
                   for p in found]
        add_references(ctx, results, title=lambda r: r["title"], url=lambda r: r["url"], content=lambda r: r["summary"])
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))
