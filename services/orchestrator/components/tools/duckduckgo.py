"""DuckDuckGo, as RAGFlow's `agent/tools/duckduckgo.py`, over the HTTP endpoints its library reads.

Web results ("general", RAGFlow's `DDGS().text`): `POST {html}/html` with the form `q`, `b` and the HTML
result page parsed as that library does (`//div[h2]`: title `./h2/a`, link `./a/@href`, snippet `./a`);
DuckDuckGo's `/l/?uddg=` redirect links are unwrapped. News (`DDGS().news`): the page `GET {base}/?q=..`
gives a `vqd` token, then `GET {base}/news.js?l=us-en&o=json&noamp=1&q=..&vqd=..&p=-1` answers JSON.
At most `top_n` results; they become the run's references and `formalized_content` (the observation);
`json` is the list ({title, href, body} or {date, title, body, url, image, source}).
The model's `channel` argument is "general" or "news"; the DSL's `channel` param is "text" or "news".
No key. Base URLs: TRELLIS_DUCKDUCKGO_BASE_URL (https://duckduckgo.com) and TRELLIS_DUCKDUCKGO_HTML_BASE_URL
(https://html.duckduckgo.com).
"""
from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone
from html import unescape
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from lxml import html as lxml_html

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SEARCHING, WebTool, add_references

_TAGS = re.compile(r"<.*?>")
_VQD = (('vqd="', '"'), ("vqd=", "&"), ("vqd='", "'"))
_ADS = ("http://www.google.com/search?q=", "https://duckduckgo.com/y.js?ad_domain")


@register
class DuckDuckGo(WebTool):
    component_name = "DuckDuckGo"
    service = "DUCKDUCKGO"
    base_url = "https://duckduckgo.com"
    hosts = {"HTML": "https://html.duckduckgo.com"}
    needs_key = False
    meta = {
        "name": "duckduckgo_search",
        "description": "DuckDuckGo is a search engine focused on privacy. It offers search capabilities for web "
                       "pages, images, and provides translation services. DuckDuckGo also features a private AI "
                       "chat interface, providing users with an AI assistant that prioritizes data protection.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with DuckDuckGo. The keywords should be the most "
                               "important words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            },
            "channel": {
                "type": "string",
                "description": "default:general. The category of the search. `news` is useful for retrieving "
                               "real-time updates, particularly about politics, sports, and major current events "
                               "covered by mainstream media sources. `general` is for broader, more general-purpose "
                               "searches that may include a wide range of sources.",
                "enum": ["general", "news"],
                "default": "general",
                "required": False,
            },
        },
    }
    defaults = {"top_n": 10, "channel": "text"}
    choices = {"channel": ("text", "news", "general")}
    positive = ("top_n",)

    thought = SEARCHING

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        top_n = int(float(self.option(args, "top_n")))
        if self.option(args, "channel") == "news":
            results = await self._news(ctx, query, top_n)
        else:
            page = await self.request_text(ctx, "POST", self.endpoint("/html", host="HTML"), data={"q": query, "b": ""},
                                           headers={"Referer": self.endpoint("/", host="HTML")})
            results = (await asyncio.to_thread(parse_html_results, page))[:top_n]  # lxml: off the event loop
        add_references(ctx, results, title=lambda r: r.get("title"), url=lambda r: r.get("href", r.get("url")),
                       content=lambda r: r.get("body"))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))

    async def _news(self, ctx: NodeContext, query: str, top_n: int) -> list[dict[str, Any]]:
        page = await self.request_text(ctx, "GET", "/", params={"q": query})
        vqd = next((page[i + len(a):page.index(b, i + len(a))] for a, b in _VQD
                    if (i := page.find(a)) >= 0 and page.find(b, i + len(a)) >= 0), "")
        if not vqd:
            raise RuntimeError(f"{ctx.component_id}: DuckDuckGo's page for {query!r} has no vqd token")
        data = await self.request_json(ctx, "GET", "/news.js", params={
            "l": "us-en", "o": "json", "noamp": "1", "q": query, "vqd": vqd, "p": "-1"})
        results = []
        for row in (data.get("results") if isinstance(data, dict) else None) or []:
            if not isinstance(row, dict) or not row.get("url"):
                continue
            date = row.get("date")
            results.append({
                "date": datetime.fromtimestamp(date, timezone.utc).isoformat() if isinstance(date, (int, float)) else date,
                "title": row.get("title", ""), "body": _text(row.get("excerpt", "")), "url": _url(row["url"]),
                "image": _url(row.get("image") or ""), "source": row.get("source", "")})
        return results[:top_n]


def parse_html_results(page: str) -> list[dict[str, str]]:
    """The results of DuckDuckGo's HTML page: [{title, href, body}], ads and repeats left out."""
    if "No  results." in page or not page.strip():
        return []
    tree = lxml_html.document_fromstring(page)
    seen, out = set(), []
    for e in tree.xpath("//div[h2]"):
        hrefs = e.xpath("./a/@href")
        href = _unwrap(str(hrefs[0])) if hrefs else ""
        if not href or href in seen or href.startswith(_ADS):
            continue
        seen.add(href)
        title = e.xpath("./h2/a/text()")
        out.append({"title": _text(str(title[0]) if title else ""), "href": _url(href),
                    "body": _text("".join(str(x) for x in e.xpath("./a//text()")))})
    return out


def _unwrap(href: str) -> str:
    """DuckDuckGo's redirect `//duckduckgo.com/l/?uddg=<url>` -> <url>."""
    parsed = urlparse(href)
    if parsed.path == "/l/" and "uddg" in parse_qs(parsed.query):
        return parse_qs(parsed.query)["uddg"][0]
    return href


def _text(raw: str) -> str:
    return unescape(_TAGS.sub("", raw)) if raw else ""


def _url(url: str) -> str:
    return unquote(url).replace(" ", "+") if url else ""
