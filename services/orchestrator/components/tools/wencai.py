"""WenCai, as RAGFlow's `agent/tools/wencai.py`: a natural-language stock (fund, index...) screen on iwencai.com,
over the two requests the `pywencai` package makes.

RAGFlow's params: the model's `query`, `top_n` (10) and `query_type` (stock, zhishu, fund, hkstock, usstock,
threeboard, conbond, insurance, futures, lccp, foreign_exchange). Output `report` (RAGFlow's), also the
observation and `formalized_content`; no references (RAGFlow gives none). RAGFlow's own call to pywencai is
commented out in its current source (its WenCai answers an empty report); this one makes pywencai's requests:

1. `POST {base}/customized/chart/get-robot-data` with JSON {question, secondary_intent: query_type,
   perpage "10", page 1, source "Ths_iwencai_Xuangu", version "2.0", add_info, log_info} -> `data.answer[0]
   .txt[0].content`: the answer's components (JSON, possibly as text).
2. A single `xuangu_tableV1` component is a stock screen: `POST {base}/gateway/urp/v7/landing/getDataList`
   (form) with the parameters of its footer URL, perpage top_n, page 1, query, query_type and the screen's
   condition, comp_id and uuid -> `answer.components[0].data.datas`: the rows, RAGFlow's report is their
   Markdown table (DataFrame.to_markdown: an index column first).
   Other components are a detail answer: each becomes a titled part of the report as RAGFlow writes a dict
   (a table for rows, text for text; parts with `meta` or images are left out). Handled as pywencai does:
   container, txt1/txt2, tab4, textblocklinkone and the common shape; pywencai's types that need more requests
   (wiki1, nestedblocks) are read as the common shape.

Headers, as pywencai sends them: `hexin-v`, `User-Agent` and `Cookie`.
- `hexin-v` is a token iwencai's own JavaScript computes in a browser (pywencai runs its 5 MB webpack bundle
  with node and jsdom). Trellis does not reimplement it: TRELLIS_WENCAI_TOKEN_COMMAND names a command whose
  output is the token (for example `node <pywencai>/hexin-v.bundle.js`), run for every request as pywencai
  does; unset, no token is sent (iwencai then refuses, and the error says what to set).
- `Cookie`: the component's `cookie` param, else WENCAI_COOKIE (pywencai requires a logged-in session's cookie).
- `User-Agent`: the `user_agent` param (pywencai's argument of that name), else Trellis's own.
Base URL: TRELLIS_WENCAI_BASE_URL (default http://www.iwencai.com, as pywencai); TRELLIS_WENCAI_TIMEOUT_S.
"""
from __future__ import annotations

import asyncio
import json
import os
import shlex
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tabulate import tabulate

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import MARKET_DATA, WebTool

QUERY_TYPES = ("stock", "zhishu", "fund", "hkstock", "usstock", "threeboard", "conbond", "insurance", "futures",
               "lccp", "foreign_exchange")
TOKEN_COMMAND = "TRELLIS_WENCAI_TOKEN_COMMAND"
USER_AGENT = "Mozilla/5.0 (compatible; Trellis WenCai tool)"
_ROBOT_DATA = {  # pywencai's get_robot_data body, besides question and secondary_intent
    "add_info": '{"urp":{"scene":1,"company":1,"business":1},"contentType":"json","searchInfo":true}',
    "perpage": "10", "page": 1, "source": "Ths_iwencai_Xuangu", "log_info": '{"input_type":"click"}',
    "version": "2.0"}


@register
class WenCai(WebTool):
    component_name = "WenCai"
    service = "WENCAI"
    base_url = "http://www.iwencai.com"
    needs_key = False
    exception_output = "report"
    meta = {
        "name": "iwencai",
        "description": """
iwencai search: search platform is committed to providing hundreds of millions of investors with the most timely, accurate and comprehensive information, covering news, announcements, research reports, blogs, forums, Weibo, characters, etc.
robo-advisor intelligent stock selection platform: through AI technology, is committed to providing investors with intelligent stock selection, quantitative investment, main force tracking, value investment, technical analysis and other types of stock selection technologies.
fund selection platform: through AI technology, is committed to providing excellent fund, value investment, quantitative analysis and other fund selection technologies for foundation citizens.
""",
        "parameters": {"query": {"type": "string", "description": "The question/conditions to select stocks.",
                                 "default": "{sys.query}", "required": True}},
    }
    defaults = {"top_n": 10, "query_type": "stock"}
    choices = {"query_type": QUERY_TYPES}
    positive = ("top_n",)
    thought = MARKET_DATA

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        query = str(self.option(args, "query") or "").strip()
        if not query:
            return _finish(ctx, "")
        query_type = str(self.option(args, "query_type"))
        answer = await self.request_json(ctx, "POST", "/customized/chart/get-robot-data",
                                         json={**_ROBOT_DATA, "secondary_intent": query_type, "question": query},
                                         headers=await self.headers(ctx))
        components = self.components(ctx, answer)
        first = components[0] if components else {}
        screen = _get(first, "data", "meta", "extra", "condition")
        if len(components) == 1 and first.get("show_type") == "xuangu_tableV1" and screen is not None:
            footer = str(_get(first, "config", "other_info", "footer_info", "url") or "")
            form = {**dict(parse_qsl(urlsplit(footer).query)), "perpage": int(float(self.option(args, "top_n"))),
                    "page": 1, "query": query, "query_type": query_type, "condition": screen,
                    "comp_id": first.get("cid", ""), "uuid": first.get("puuid", "")}
            rows = _get(await self.request_json(ctx, "POST", "/gateway/urp/v7/landing/getDataList",
                                                data={k: _form(v) for k, v in form.items()},
                                                headers=await self.headers(ctx)),
                        "answer", "components", 0, "data", "datas")
            return _finish(ctx, _table(rows) if isinstance(rows, list) and rows else "")
        return _finish(ctx, _report({k: v for c in components
                                     if (k := _key(c)) and (v := _show(c, components)) is not None}))

    async def headers(self, ctx: NodeContext) -> dict[str, str]:
        headers = {"User-Agent": str(self.params.given("user_agent") or "").strip() or USER_AGENT}
        cookie = str(self.params.given("cookie") or "").strip() or os.environ.get("WENCAI_COOKIE", "").strip()
        if cookie:
            headers["Cookie"] = cookie
        token = await self.token(ctx)
        if token:
            headers["hexin-v"] = token
        return headers

    async def token(self, ctx: NodeContext) -> str:
        """The hexin-v token printed by TRELLIS_WENCAI_TOKEN_COMMAND, or "" when none is set."""
        command = os.environ.get(TOKEN_COMMAND, "").strip()
        if not command:
            return ""
        cid, limit = ctx.component_id, self.time_limit()
        try:
            proc = await asyncio.create_subprocess_exec(*shlex.split(command), stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
        except (OSError, ValueError) as exc:
            raise FieldError(cid, TOKEN_COMMAND, f"cannot run {command!r}: {exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), limit)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise TimeoutError(f"{cid}: WenCai: {TOKEN_COMMAND} printed no token within {limit:g} s") from None
        token = out.decode(errors="replace").strip()
        if proc.returncode != 0 or not token or any(c in token for c in "\r\n"):
            raise RuntimeError(f"{cid}: WenCai: {TOKEN_COMMAND} ({command!r}) exited {proc.returncode} without one "
                               f"token line: {err.decode(errors='replace').strip()[:200]}")
        return token

    def components(self, ctx: NodeContext, answer: Any) -> list[dict[str, Any]]:
        content = _get(answer, "data", "answer", 0, "txt", 0, "content")
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except ValueError:
                content = None
        found = _get(content, "components")
        if not isinstance(found, list):
            hint = "" if os.environ.get(TOKEN_COMMAND, "").strip() else (
                f" (no hexin-v token was sent: iwencai wants one, set {TOKEN_COMMAND})")
            raise RuntimeError(f"{ctx.component_id}: WenCai: iwencai's answer has no components at "
                               f"data.answer[0].txt[0].content{hint}: {json.dumps(answer, ensure_ascii=False)[:200]}")
        return [c for c in found if isinstance(c, dict)]


def _finish(ctx: NodeContext, report: str) -> str:
    ctx.set_output("report", report)
    ctx.set_output("formalized_content", report)
    return report


def _get(value: Any, *path: str | int) -> Any:
    """pydash.get: the value at `path` (keys and list indexes), or None."""
    for step in path:
        if isinstance(step, int) and isinstance(value, list) and -len(value) <= step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict):
            value = value.get(step)
        else:
            return None
    return value


def _form(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------------- pywencai's convert.py, RAGFlow's report
def _key(comp: dict[str, Any]) -> str:
    return str(_get(comp, "title_config", "data", "h1") or _get(comp, "config", "title") or comp.get("show_type") or "")


def _show(comp: dict[str, Any], comps: list[dict[str, Any]]) -> Any:
    """pywencai's show_type_handler: rows (a list of records), text, or a dict of named parts."""
    kind = comp.get("show_type")
    if kind == "container":
        children = [next((c for c in comps if c.get("uuid") == u), None) for u in _get(comp, "config", "children") or []]
        return {c["show_type"]: _show(c, comps) for c in children if c and c.get("show_type")}
    if kind in ("txt1", "txt2"):
        return _get(comp, "data", "content")
    if kind == "tab4":
        return {str(tab["tab_name"]): {t.get("show_type"): _show(t, tab.get("list") or []) for t in tab.get("list") or []}
                for tab in comp.get("tab_list") or [] if isinstance(tab, dict) and tab.get("tab_name") is not None}
    if kind == "textblocklinkone":
        return _Rows(_get(comp, "data", "result", "data") or [])
    datas = _get(comp, "data", "datas")
    return _Rows(datas) if isinstance(datas, list) else comp.get("data")


class _Rows(list):  # type: ignore[type-arg]
    """Records that pywencai returns as a DataFrame (RAGFlow writes them without their title)."""


def _report(parts: dict[str, Any]) -> str:
    """RAGFlow's WenCai report of a dict answer: its parts, separated by a blank line."""
    out = []
    for key, value in parts.items():
        if isinstance(value, _Rows):
            if not any(isinstance(r, dict) and "image_url" in r for r in value):
                out.append(_table(value))
        elif isinstance(value, list):
            out.append(f"{key}\n{_table(value)}")
        elif isinstance(value, str):
            out.append(f"{key}\n{value}")
        elif isinstance(value, dict):
            if "meta" not in value:
                out.append(_table([v if isinstance(v, dict) else {0: v} for v in value.values()], list(value)))
        else:
            out.append(f"{key}\n{value}")
    return "\n\n".join(out)


def _table(records: list[Any], index: list[Any] | None = None) -> str:
    """pandas' `DataFrame(records).to_markdown()`: the columns in order of appearance, an index column first."""
    rows = [r if isinstance(r, dict) else {0: r} for r in records]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    body = [[index[i] if index else i, *(_cell(r.get(c)) for c in columns)] for i, r in enumerate(rows)]
    return tabulate(body, headers=["", *map(str, columns)], tablefmt="pipe", missingval="nan")


def _cell(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value
