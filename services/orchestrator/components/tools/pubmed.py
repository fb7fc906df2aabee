"""PubMed, as RAGFlow's `agent/tools/pubmed.py`, over NCBI's E-utilities (what Bio.Entrez calls).

1. `GET {base}/entrez/eutils/esearch.fcgi?db=pubmed&retmax=<top_n>&term=...&tool=biopython&email=<email>`
   -> eSearchResult XML, its IdList;
2. `GET {base}/entrez/eutils/efetch.fcgi?db=pubmed&id=1,2&retmode=xml&tool=...&email=...` -> PubmedArticleSet.
Each article becomes a reference (title, https://pubmed.ncbi.nlm.nih.gov/<PMID>, RAGFlow's "Title/Authors/
Journal/Volume/Issue/Pages/DOI/Abstract" text) and a block of `formalized_content` (the observation).
Params: top_n 12, email (NCBI asks for one). An NCBI key (optional, raises the rate limit) from the
component's `api_key` or PUBMED_API_KEY is sent as `api_key`. Base URL: TRELLIS_PUBMED_BASE_URL (default
https://eutils.ncbi.nlm.nih.gov).
"""
from __future__ import annotations

import re
from typing import Any

from defusedxml import ElementTree

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import SCHOLARLY, WebTool, add_references

_INLINE_TAGS = re.compile(r"<(/?)b>|<(/?)i>")  # RAGFlow drops bold/italic markup before parsing


@register
class PubMed(WebTool):
    component_name = "PubMed"
    service = "PUBMED"
    base_url = "https://eutils.ncbi.nlm.nih.gov"
    needs_key = False
    meta = {
        "name": "pubmed_search",
        "description": """
PubMed is an openly accessible, free database which includes primarily the MEDLINE database of references and abstracts on life sciences and biomedical topics.
In addition to MEDLINE, PubMed provides access to:
 - older references from the print version of Index Medicus, back to 1951 and earlier
 - references to some journals before they were indexed in Index Medicus and MEDLINE, for instance Science, BMJ, and Annals of Surgery
 - very recent entries to records for an article before it is indexed with Medical Subject Headings (MeSH) and added to MEDLINE
 - a collection of books available full-text and other subsets of NLM records[4]
 - PMC citations
 - NCBI Bookshelf
            """,
        "parameters": {
            "query": {
                "type": "string",
                "description": "The search keywords to execute with PubMed. The keywords should be the most important "
                               "words/terms(includes synonyms) from the original request.",
                "default": "{sys.query}",
                "required": True,
            }
        },
    }
    defaults = {"top_n": 12, "email": "A.N.Other@example.com"}
    positive = ("top_n",)

    thought = SCHOLARLY

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        common = {"tool": "biopython", "email": str(self.option(args, "email"))}
        if key := self.api_key(ctx):
            common["api_key"] = key
        found = _xml(ctx, await self.request_text(ctx, "GET", "/entrez/eutils/esearch.fcgi", params={
            "db": "pubmed", "retmax": str(int(float(self.option(args, "top_n")))), "term": query, **common}))
        if found.tag != "eSearchResult" or found.find("ERROR") is not None:
            raise RuntimeError(f"{ctx.component_id}: PubMed search failed: {found.findtext('ERROR') or found.tag}")
        ids = [i.text for i in found.iterfind("IdList/Id") if i.text]
        if not ids:
            return ""
        text = await self.request_text(ctx, "GET", "/entrez/eutils/efetch.fcgi",
                                       params={"db": "pubmed", "id": ",".join(ids), "retmode": "xml", **common})
        articles = _xml(ctx, _INLINE_TAGS.sub("", text)).findall("PubmedArticle")
        papers = [{"pmid": a.findtext("MedlineCitation/PMID") or "",
                   "title": a.findtext("MedlineCitation/Article/ArticleTitle") or "",
                   "content": format_article(a)} for a in articles]
        add_references(ctx, papers, title=lambda p: p["title"],
                       url=lambda p: "https://pubmed.ncbi.nlm.nih.gov/" + p["pmid"], content=lambda p: p["content"])
        ctx.set_output("json", papers)
        return str(ctx.output("formalized_content"))


def _xml(ctx: NodeContext, text: str) -> Any:
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise RuntimeError(f"{ctx.component_id}: PubMed answered something that is not XML: {exc}") from None


def format_article(article: Any) -> str:
    """RAGFlow's `_format_pubmed_content`: the reference text of one PubmedArticle."""
    def find(path: str) -> str | None:
        return article.findtext(path) or None

    authors = []
    for author in article.findall(".//AuthorList/Author"):
        name = f"{author.findtext('ForeName') or ''} {author.findtext('LastName') or ''}".strip()
        if name:
            authors.append(name)
    doi = next((e.text for e in article.findall(".//ArticleId") if e.get("IdType") == "doi"), None)
    abstract = find("MedlineCitation/Article/Abstract/AbstractText") or "No abstract available"
    return (f"Title: {find('MedlineCitation/Article/ArticleTitle') or 'No title'}\n"
            f"Authors: {', '.join(authors) if authors else 'Unknown Authors'}\n"
            f"Journal: {find('MedlineCitation/Article/Journal/Title') or 'Unknown Journal'}\n"
            f"Volume: {find('MedlineCitation/Article/Journal/JournalIssue/Volume') or '-'}\n"
            f"Issue: {find('MedlineCitation/Article/Journal/JournalIssue/Issue') or '-'}\n"
            f"Pages: {find('MedlineCitation/Article/Pagination/MedlinePgn') or '-'}\n"
            f"DOI: {doi or '-'}\nAbstract: {abstract.strip()}")
