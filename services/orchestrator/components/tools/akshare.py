"""AkShare, as RAGFlow's `agent/tools/akshare.py`: the latest East Money (东方财富) news of an A-share stock,
over the endpoint `akshare.stock_news_em` reads.

`GET {base}/search/jsonp?cb=<callback>&param=<JSON: keyword = the stock code, type cmsArticleWebOld,
pageSize>` -> JSONP whose `result.cmsArticleWebOld` lists the articles (title, content, date, mediaName, url
or code). As akshare does, the `<em>` highlight tags, ideographic spaces and CRLFs are removed; the first
`top_n` (10) become RAGFlow's text, the observation and `formalized_content`:
`<a href="url">title</a>\\n 新闻内容: content \\n发布时间:date \\n文章来源: media`, articles separated by a
blank line. No key. Base URL: TRELLIS_AKSHARE_BASE_URL (default https://search-api-web.eastmoney.com).
"""
from __future__ import annotations

import json
import re
from typing import Any

from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool

_CALLBACK = "jQuery3510875346244069884_1668256937995"
_EM = re.compile(r"\(<em>|</em>\)|<em>|</em>")


@register
class AkShare(WebTool):
    component_name = "AkShare"
    service = "AKSHARE"
    base_url = "https://search-api-web.eastmoney.com"
    needs_key = False
    meta = {
        "name": "akshare_stock_news",
        "description": "AkShare retrieves the latest news articles for a given Chinese A-share stock from East Money "
                       "(东方财富).",
        "parameters": {
            "query": {"type": "string", "description": "The stock symbol/code to fetch news for, e.g. '600519'.",
                      "default": "{sys.query}", "required": True}
        },
    }
    defaults = {"top_n": 10}
    positive = ("top_n",)

    thought = "Looking up the latest stock news for: {}"

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        symbol = str(self.option(args, "query") or "").strip()
        if not symbol:
            return ""
        top_n = int(float(self.option(args, "top_n")))
        search = {"uid": "", "keyword": symbol, "type": ["cmsArticleWebOld"], "client": "web", "clientType": "web",
                  "clientVersion": "curr", "param": {"cmsArticleWebOld": {
                      "searchScope": "default", "sort": "default", "pageIndex": 1, "pageSize": max(top_n, 10),
                      "preTag": "<em>", "postTag": "</em>"}}}
        text = await self.request_text(ctx, "GET", "/search/jsonp", params={
            "cb": _CALLBACK, "param": json.dumps(search, ensure_ascii=False, separators=(",", ":")),
            "_": "1668256937996"})
        articles = _articles(ctx, text)[:top_n]
        result = "\n\n".join(
            f'<a href="{_url(a)}">{_clean(a.get("title"))}</a>\n 新闻内容: '
            f'{_clean(a.get("content")).replace(chr(0x3000), "").replace(chr(13) + chr(10), " ")} \n'
            f'发布时间:{a.get("date", "")} \n文章来源: {a.get("mediaName", "")}' for a in articles)
        ctx.set_output("formalized_content", result)
        return result


def _articles(ctx: NodeContext, text: str) -> list[dict[str, Any]]:
    body = text.strip()
    if body.startswith(_CALLBACK + "("):
        body = body[len(_CALLBACK) + 1:].rstrip(";").removesuffix(")")
    try:
        data = json.loads(body)
        articles = data["result"]["cmsArticleWebOld"]
    except (ValueError, KeyError, TypeError):
        raise RuntimeError(f"{ctx.component_id}: East Money's news answer is not what akshare reads: "
                           f"{text[:200]!r}") from None
    return [a for a in articles or [] if isinstance(a, dict)]


def _clean(value: Any) -> str:
    return _EM.sub("", "" if value is None else str(value))


def _url(article: dict[str, Any]) -> str:
    return str(article.get("url") or f"http://finance.eastmoney.com/a/{article.get('code', '')}.html")
