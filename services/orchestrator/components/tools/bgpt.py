"""BGPT, as RAGFlow's `agent/tools/bgpt.py`: structured evidence from full-text scientific papers.

`POST {base}/api/mcp-search` with `{"query", "num_results": top_n (10), "api_key"?, "days_back"?}`; each
paper becomes a reference (title, url else doi, RAGFlow's "Title/Authors/.../How to falsify" text) and a
block of `formalized_content` (the observation); `json` is the paper list. The key is optional (the
component's `api_key`, else BGPT_API_KEY). Base URL: TRELLIS_BGPT_BASE_URL (default https://bgpt.pro).
"""
from __future__ import annotations

from typing import Annotated, Any

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.params import validator
from services.orchestrator.components.tools._web import WebParams, WebTool, add_references

_FIELDS = (("Title", ("title",)), ("Authors", ("authors",)), ("Journal", ("journal",)), ("Year", ("year",)),
           ("DOI", ("doi",)), ("Abstract", ("abstract",)),
           ("Methods", ("methods_and_experimental_techniques", "methods")),
           ("Sample size / population", ("sample_size_and_population_characteristics", "sample_size_and_population")),
           ("Results", ("results_and_conclusions", "results")),
           ("Limitations", ("paper_limitations_and_biases", "limitations")),
           ("Conflicts of interest", ("conflict_of_interest_statements", "conflict_of_interest")),
           ("Data availability", ("data_availability_statements", "data_availability")),
           ("Blind spots", ("study_blindspots",)), ("How to falsify", ("how_to_falsify",)))



def _days(days: Any) -> Any:
    text = str(days).strip()
    if days not in (None, "") and not (text.isascii() and text.isdigit() and int(text) > 0):
        raise ValueError(f"must be a positive integer, got {days!r}")
    return days


class BGPTParams(WebParams):
    days_back: Annotated[Any, validator(_days)] = None  # only papers of the last n days


@register
class BGPT(WebTool):
    component_name = "BGPT"
    service = "BGPT"
    base_url = "https://bgpt.pro"
    timeout_s = 25.0
    needs_key = False
    meta = {
        "name": "bgpt_search",
        "description": "BGPT searches scientific papers and returns structured evidence extracted from full-text "
                       "studies: methods, sample sizes, results, limitations, conflicts of interest, data/code "
                       "availability, study blind spots, quality scores, and falsification prompts. Useful when the "
                       "agent must judge a scientific claim, not just find abstracts.",
        "parameters": {
            "query": {
                "type": "string",
                "description": "Natural-language scientific search query. Use the most important terms from the "
                               "user's request.",
                "default": "{sys.query}",
                "required": True,
            }
        },
    }
    defaults = {"top_n": 10, "api_key": "", "days_back": None}
    params_model = BGPTParams  # the generated params (meta, defaults) build on it
    positive = ("top_n",)

    thought = "Searching BGPT for structured scientific evidence on `{}`."

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        ctx.set_output("json", [])
        if not query:
            return ""
        body: dict[str, Any] = {"query": query, "num_results": int(float(self.option(args, "top_n")))}
        if key := self.api_key(ctx):
            body["api_key"] = key
        if days := self.option(args, "days_back"):
            body["days_back"] = int(days)
        data = await self.request_json(ctx, "POST", "/api/mcp-search", json=body)
        results = data.get("results", []) if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise RuntimeError(f"{ctx.component_id}: BGPT's answer has no 'results' list: {str(data)[:200]}")
        results = [r for r in results if isinstance(r, dict)]
        add_references(ctx, results, title=lambda p: p.get("title") or "Untitled",
                       url=lambda p: p.get("url") or p.get("doi") or "", content=format_paper)
        ctx.set_output("json", results)
        return str(ctx.output("formalized_content"))


def format_paper(paper: dict[str, Any]) -> str:
    """RAGFlow's `_format_bgpt_paper`: one line per evidence field, "-" when the paper has none."""
    def field(names: tuple[str, ...]) -> str:
        for name in names:
            value = paper.get(name)
            text = "" if value is None else str(value).strip()
            if text:
                return text
        return "-"

    return "\n".join(f"{label}: {field(names)}" for label, names in _FIELDS)
