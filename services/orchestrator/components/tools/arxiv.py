"""ArXiv, as RAGFlow's `agent/tools/arxiv.py`, over arXiv's export API (what the `arxiv` library calls).

`GET {base}/api/query?search_query=...&id_list=&sortBy=<sort_by>&sortOrder=descending&start=0&max_results=<top_n>`
(top_n 12, sort_by submittedDate | lastUpdatedDate | relevance). The Atom feed's entries (title, PDF link,
summary) become the run's references and `formalized_content` (the observation); `json` is the list of
papers {title, summary, pdf_url, entry_id, published, updated, authors}. No key. Base URL:
TRELLIS_ARXIV_BASE_URL (default https://export.arxiv.org).
"""
from __future__ import annotations

from typing import Any

from defusedxml import ElementTree

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SEARCHING, WebTool, add_references

_ATOM = "{http://www.w3.org/2005/Atom}"


@register
class ArXiv(WebTool):
    component_name = "ArXiv"
    service = "ARXIV"
    base_url = "https://export.arxiv.org"
    needs_key = False
    meta = {
        "name": "arxiv_search",
        "description": "arXiv is a free distribution service and an open-access archive for nearly 2.4 million "
                       "scholarly articles in the fields of physics, mathematics, computer science, quantitative "
                       "biology, quantitative finance, statistics, electrical engineering and systems science, and "
                       "economics. Materials on this site are not peer-reviewed by arXiv.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with arXiv. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            }
        },
    }
    defaults = {"top_n": 12, "sort_by": "submittedDate"}
    choices = {"sort_by": ("submittedDate", "lastUpdatedDate", "relevance")}
    positive = ("top_n",)

    thought = SEARCHING

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        params = {"search_query": query, "id_list": "", "sortBy": self.option(args, "sort_by"),
                  "sortOrder": "descending", "start": "0", "max_results": str(int(float(self.option(args, "top_n"))))}
        feed = await self.request_text(ctx, "GET", "/api/query", params=params)
        papers = parse_feed(ctx, feed)
        add_references(ctx, papers, title=lambda p: p["title"], url=lambda p: p["pdf_url"],
                       content=lambda p: p["summary"])
        ctx.set_output("json", papers)
        return str(ctx.output("formalized_content"))


def parse_feed(ctx: NodeContext, feed: str) -> list[dict[str, Any]]:
    """The papers of an arXiv Atom feed, as the `arxiv` library reads them."""
    try:
        root = ElementTree.fromstring(feed)
    except ElementTree.ParseError as exc:
        raise RuntimeError(f"{ctx.component_id}: arXiv answered something that is not an Atom feed: {exc}") from None
    papers = []
    for entry in root.iter(f"{_ATOM}entry"):
        links = entry.findall(f"{_ATOM}link")
        pdf = next((link.get("href") for link in links if link.get("title") == "pdf"), None)
        papers.append({
            "entry_id": _text(entry, "id"),
            "title": " ".join(_text(entry, "title").split()),
            "summary": _text(entry, "summary").strip(),
            "pdf_url": pdf,
            "published": _text(entry, "published"),
            "updated": _text(entry, "updated"),
            "authors": [_text(a, "name") for a in entry.findall(f"{_ATOM}author")],
        })
    return papers


def _text(node: Any, tag: str) -> str:
    found = node.find(f"{_ATOM}{tag}")
    return found.text or "" if found is not None else ""
