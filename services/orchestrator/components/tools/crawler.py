"""Crawler, as RAGFlow's `agent/tools/crawler.py`: a web page's content as Markdown, clean HTML or text.

The model (or the node's `query`) gives an absolute http(s) URL; the page is fetched with `GET` through the
engine's outbound client (SSRF guard, no redirects followed, bounded body) and becomes `formalized_content`,
the observation, by `extract_type`: `markdown` (default; scripts, styles and page chrome dropped, then
converted with markdownify), `html` (cleaned: no scripts, styles, forms or comments) or `content` (the
readable text). Unlike RAGFlow's crawl4ai, no browser runs the page's JavaScript (the Browser component
does that), and the `proxy` param is not used: every request leaves through the guarded client. No key.
Time limit: TRELLIS_CRAWLER_TIMEOUT_S (default 60 s).
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import lxml.html
from lxml import etree
from lxml_html_clean import Cleaner
from markdownify import markdownify

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.invoke import html_to_text
from services.orchestrator.components.tools._web import WebTool

_CLEAN = Cleaner(scripts=True, javascript=True, style=True, comments=True, forms=True, embedded=True, frames=True,
                 meta=True, page_structure=False, safe_attrs_only=True)
_CHROME = ("nav", "header", "footer", "aside", "noscript", "svg", "iframe")


@register
class Crawler(WebTool):
    component_name = "Crawler"
    service = "CRAWLER"
    timeout_s = 60.0
    needs_key = False
    meta = {
        "name": "web_crawler",
        "description": "This tool can be used to crawl a web page and return its content as HTML, Markdown, or the "
                       "extracted main text.",
        "parameters": {
            "query": {"type": "string",
                      "description": "The absolute URL (including the http:// or https:// scheme) of the web page to "
                                     "crawl.",
                      "default": "{sys.query}", "required": True}
        },
    }
    defaults = {"proxy": None, "extract_type": "markdown"}
    choices = {"extract_type": ("html", "markdown", "content")}

    thought = "Crawling {}..."

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        url = str(self.option(args, "query") or "").strip()
        if not url:
            return ""
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise FieldError(ctx.component_id, "query", f"URL not valid: {url!r} (an absolute http(s) URL is needed)")
        try:
            resp = await self.request(ctx, "GET", url, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        except FieldError as exc:  # the guard refused the user's URL (the base names the base-URL variable)
            raise FieldError(ctx.component_id, "query", str(exc).split(": ", 2)[-1]) from None
        if not 200 <= resp.status < 300:  # a redirect is not followed: say where it leads
            raise RuntimeError(f"{ctx.component_id}: Crawler: {url} answered HTTP {resp.status}"
                               f"{' to ' + resp.headers.get('Location', '') if resp.headers.get('Location') else ''}")
        text = page(resp.text, str(self.params.extract_type or "markdown"))
        ctx.set_output("formalized_content", text)
        return text


def page(html: str, extract_type: str) -> str:
    """The page as RAGFlow's extract types: markdown, html (cleaned) or content (readable text)."""
    if not html.strip():
        return ""
    if extract_type == "content":
        return html_to_text(html).strip()
    try:
        tree = lxml.html.document_fromstring(html)
    except (ValueError, etree.ParserError):
        return html_to_text(html).strip()
    cleaned = _CLEAN.clean_html(tree)
    if extract_type == "html":
        return lxml.html.tostring(cleaned, encoding="unicode")
    for node in cleaned.iter(*_CHROME):
        node.drop_tree()
    body = cleaned.find("body")
    markup = lxml.html.tostring(body if body is not None else cleaned, encoding="unicode")
    return markdownify(markup, heading_style="ATX").strip()
