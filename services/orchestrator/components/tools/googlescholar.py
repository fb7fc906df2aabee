"""GoogleScholar, as RAGFlow's `agent/tools/googlescholar.py`, over Google Scholar's results page (what the
`scholarly` library reads).

`GET {base}/scholar?hl=en&q=...&as_vis=0&as_sdt=<0|1>,33[&as_ylo=..][&as_yhi=..][&scisbd=1]` (scholarly's
URL: `as_sdt=0,33` includes patents, `scisbd=1` sorts by date). Each result (`div.gs_or`) is read as
scholarly reads it: title and link (`h3.gs_rt`), authors, venue and year (`div.gs_a`), abstract snippet
(`div.gs_rs`), "Cited by" count, PDF link. The first `top_n` (12) become the run's references and
`formalized_content` ("\\n author: a,b\\n Abstract: ..."), `json` the list of {bib, pub_url, eprint_url,
num_citations}. Google Scholar has no API and may answer automated traffic with a CAPTCHA page: that is
reported as an error. No key. Base URL: TRELLIS_GOOGLESCHOLAR_BASE_URL (default https://scholar.google.com).
"""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin

import lxml.html

from services.orchestrator.components._fields import as_bool
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SCHOLARLY, WebTool, add_references

_CITED = re.compile(r"Cited by (\d+)")
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")


@register
class GoogleScholar(WebTool):
    component_name = "GoogleScholar"
    service = "GOOGLESCHOLAR"
    base_url = "https://scholar.google.com"
    needs_key = False
    meta = {
        "name": "google_scholar_search",
        "description": "Google Scholar provides a simple way to broadly search for scholarly literature. From one "
                       "place, you can search across many disciplines and sources: articles, theses, books, abstracts "
                       "and court opinions, from academic publishers, professional societies, online repositories, "
                       "universities and other web sites. Google Scholar helps you find relevant work across the "
                       "world of scholarly research.",
        "parameters": {
            "query": {"type": "string",
                      "description": "The search keyword to execute with Google Scholar. The keywords should be the most "
                                     "important words/terms(includes synonyms) from the original request.",
                      "default": "{sys.query}", "required": True}
        },
    }
    defaults = {"top_n": 12, "sort_by": "relevance", "year_low": None, "year_high": None, "patents": True}
    choices = {"sort_by": ("date", "relevance")}
    positive = ("top_n",)

    thought = SCHOLARLY

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        params = {"hl": "en", "q": query}
        for name, key in (("year_low", "as_ylo"), ("year_high", "as_yhi")):
            if (value := self.option(args, name)) not in (None, ""):
                params[key] = str(int(value))
        params["as_vis"] = "0"
        params["as_sdt"] = f"{1 - int(as_bool(self.option(args, 'patents')))},33"
        if self.option(args, "sort_by") == "date":
            params["scisbd"] = "1"
        html = await self.request_text(ctx, "GET", "/scholar", params=params,
                                       headers={"Accept": "text/html", "Accept-Language": "en"})
        results = parse_results(html, self.endpoint("/"))
        if not results and ("gs_captcha" in html or "recaptcha" in html.lower()):
            raise RuntimeError(f"{ctx.component_id}: Google Scholar answered with a CAPTCHA page (automated "
                               "queries are being refused)")
        results = results[: int(float(self.option(args, "top_n")))]
        add_references(ctx, results, title=lambda r: r["bib"]["title"], url=lambda r: r["pub_url"],
                       content=lambda r: "\n author: " + ",".join(r["bib"]["author"]) + "\n Abstract: "
                       + r["bib"].get("abstract", "no abstract"))
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))


def parse_results(html: str, base: str) -> list[dict[str, Any]]:
    """The publications of a Google Scholar results page, in scholarly's shape."""
    if not html.strip():
        return []
    tree = lxml.html.document_fromstring(html)
    results = []
    for row in tree.xpath('//div[contains(concat(" ", normalize-space(@class), " "), " gs_or ")]'):
        box = _first(row, "gs_ri")
        heading = _first(box, "gs_rt") if box is not None else None
        if heading is None:
            continue
        for tag in heading.xpath('.//span[contains(@class, "gs_ctu") or contains(@class, "gs_ctc")]'):
            tag.drop_tree()  # "[PDF]", "[CITATION]" markers
        link = heading.find(".//a")
        bib: dict[str, Any] = {"title": " ".join(heading.text_content().split())}
        byline = _first(box, "gs_a")
        if byline is not None:
            parts = byline.text_content().replace("\xa0", " ").replace("…", "").split(" - ")
            bib["author"] = [a.strip() for a in parts[0].split(",") if a.strip()]
            if len(parts) > 1:
                bib["venue"] = parts[1].rsplit(",", 1)[0].strip()
                if year := _YEAR.search(parts[1]):
                    bib["pub_year"] = year.group(1)
        else:
            bib["author"] = []
        snippet = _first(box, "gs_rs")
        if snippet is not None:
            abstract = " ".join(snippet.text_content().replace("…", "").split())
            bib["abstract"] = abstract[9:].strip() if abstract[:8].lower() == "abstract" else abstract
        pdf = row.xpath('.//div[contains(@class, "gs_ggs")]//a/@href')
        cited = _CITED.search(row.text_content())
        results.append({"container_type": "Publication", "source": "PUBLICATION_SEARCH_SNIPPET", "bib": bib,
                        "pub_url": urljoin(base, link.get("href")) if link is not None and link.get("href") else "",
                        "eprint_url": urljoin(base, pdf[0]) if pdf else "",
                        "num_citations": int(cited.group(1)) if cited else 0})
    return results


def _first(node: Any, css_class: str) -> Any:
    found = node.xpath(f'.//*[contains(concat(" ", normalize-space(@class), " "), " {css_class} ")]')
    return found[0] if found else None
