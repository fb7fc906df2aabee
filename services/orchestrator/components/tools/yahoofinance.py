"""YahooFinance, as RAGFlow's `agent/tools/yahoofinance.py`, over the Yahoo Finance endpoints yfinance reads.

A session first gets Yahoo's cookie (`GET {cookie}/`, https://fc.yahoo.com) and a crumb
(`GET {base}/v1/test/getcrumb` with that cookie); every call below carries both. Then, per RAGFlow flag:
- `info` (default on): `GET {base}/v10/finance/quoteSummary/<code>?modules=financialData,quoteType,
  defaultKeyStatistics,assetProfile,summaryDetail&formatted=false` -> "# Information:" key/value table;
- `history`: `GET {base}/v8/finance/chart/<code>?range=1mo&interval=1d` -> "# History:" (daily OHLCV);
- `financials`: quoteSummary `calendarEvents` -> "# Calendar:";
- `balance_sheet` / `cash_flow_statement`: `GET {base}/ws/fundamentals-timeseries/v1/finance/timeseries/<code>
  ?symbol=<code>&type=annual<Key>,...&period1=..&period2=..` (then `quarterly<Key>`) -> "# Balance sheet:" and
  "# Quarterly balance sheet:" (or cash flow), one row per item ("Total Assets", as yfinance labels them),
  one column per period, newest first;
- `news` (default on): `GET {base}/v1/finance/search?q=<code>&newsCount=10&quotesCount=0` -> "# News:".
The sections, as Markdown tables, are the `report` output and the observation.
No key. Base URLs: TRELLIS_YAHOOFINANCE_BASE_URL (https://query2.finance.yahoo.com) and
TRELLIS_YAHOOFINANCE_COOKIE_BASE_URL (https://fc.yahoo.com).
"""
from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from services.orchestrator.components._fields import as_bool
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import MARKET_DATA, WebTool

INFO_MODULES = "financialData,quoteType,defaultKeyStatistics,assetProfile,summaryDetail"
# The main items of yfinance's statement keys (its full lists run to ~100 per statement).
BALANCE_SHEET = ("TotalAssets", "CurrentAssets", "CashAndCashEquivalents", "Receivables", "Inventory",
                 "NetPPE", "Goodwill", "TotalLiabilitiesNetMinorityInterest", "CurrentLiabilities",
                 "LongTermDebt", "TotalDebt", "NetDebt", "StockholdersEquity", "CommonStockEquity",
                 "TotalEquityGrossMinorityInterest", "RetainedEarnings",
                 "WorkingCapital", "TangibleBookValue", "OrdinarySharesNumber")
CASH_FLOW = ("OperatingCashFlow", "InvestingCashFlow", "FinancingCashFlow", "FreeCashFlow", "CapitalExpenditure",
             "RepurchaseOfCapitalStock", "CashDividendsPaid", "IssuanceOfDebt", "RepaymentOfDebt",
             "DepreciationAndAmortization", "StockBasedCompensation", "ChangesInCash", "EndCashPosition")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_FLAGS = ("info", "history", "count", "financials", "income_stmt", "balance_sheet", "cash_flow_statement", "news")


@register
class YahooFinance(WebTool):
    component_name = "YahooFinance"
    service = "YAHOOFINANCE"
    base_url = "https://query2.finance.yahoo.com"
    hosts = {"COOKIE": "https://fc.yahoo.com"}
    timeout_s = 60.0
    needs_key = False
    meta = {
        "name": "yahoo_finance",
        "description": "The Yahoo Finance is a service that provides access to real-time and historical stock market "
                       "data. It enables users to fetch various types of stock information, such as price quotes, "
                       "historical prices, company profiles, and financial news. The API offers structured data, "
                       "allowing developers to integrate market data into their applications and analysis tools.",
        "parameters": {"stock_code": {"type": "string", "description": "The stock code or company name.",
                                      "default": "{sys.query}", "required": True}},
    }
    defaults = {"info": True, "history": False, "count": False, "financials": False, "income_stmt": False,
                "balance_sheet": False, "cash_flow_statement": False, "news": True}
    choices = {flag: (True, False) for flag in _FLAGS}
    exception_output = "report"

    thought, thought_arg = MARKET_DATA, "stock_code"

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        code = str(self.option(args, "stock_code") or "").strip()
        ctx.set_output("report", "")
        if not code:
            return ""
        on = {flag: as_bool(self.option(args, flag)) for flag in _FLAGS}
        auth = await self._session(ctx)
        symbol = quote(code, safe="")
        sections = []
        if on["info"]:
            info = await self._summary(ctx, auth, symbol, INFO_MODULES)
            flat = {k: v for module in info.values() if isinstance(module, dict) for k, v in module.items()
                    if not isinstance(v, (dict, list))}
            sections.append("# Information:\n" + table(["", "0"], [[k, v] for k, v in flat.items()]) + "\n")
        if on["history"]:
            sections.append("# History:\n" + await self._history(ctx, auth, symbol) + "\n")
        if on["financials"]:
            events = (await self._summary(ctx, auth, symbol, "calendarEvents")).get("calendarEvents") or {}
            rows = [[k, ", ".join(map(_date, v)) if isinstance(v, list) else _date(v)]
                    for k, v in _flatten(events).items()]
            sections.append("# Calendar:\n" + table(["", "0"], rows) + "\n")
        for flag, keys, title in (("balance_sheet", BALANCE_SHEET, "balance sheet"),
                                  ("cash_flow_statement", CASH_FLOW, "cash flow statement")):
            if on[flag]:
                sections.append(f"# {title.capitalize()}:\n" + await self._statement(ctx, auth, symbol, "annual", keys) + "\n")
                sections.append(f"# Quarterly {title}:\n" + await self._statement(ctx, auth, symbol, "quarterly", keys) + "\n")
        if on["news"]:
            data = await self.request_json(ctx, "GET", "/v1/finance/search", params={
                "q": code, "newsCount": 10, "quotesCount": 0, **auth["params"]}, headers=auth["headers"])
            news = [n for n in (data.get("news") if isinstance(data, dict) else None) or [] if isinstance(n, dict)]
            cols = ["title", "publisher", "link", "providerPublishTime"]
            sections.append("# News:\n" + table(["", *cols], [[i, *(_date(n.get(c)) if c == "providerPublishTime"
                                                                     else n.get(c, "") for c in cols)]
                                                               for i, n in enumerate(news)]) + "\n")
        report = "\n\n".join(sections)
        ctx.set_output("report", report)
        return report

    async def _session(self, ctx: NodeContext) -> dict[str, Any]:
        """Yahoo's cookie and crumb, which its API wants with every call."""
        resp = await self.request(ctx, "GET", self.endpoint("/", host="COOKIE"), check_status=False)
        cookie = resp.headers.get("Set-Cookie", "").split(";", 1)[0]
        headers = {"Cookie": cookie} if cookie else {}
        crumb = (await self.request_text(ctx, "GET", "/v1/test/getcrumb", headers=headers)).strip()
        if not crumb or "<" in crumb:
            raise RuntimeError(f"{ctx.component_id}: Yahoo Finance gave no crumb (got {crumb[:80]!r})")
        return {"headers": headers, "params": {"crumb": crumb}}

    async def _summary(self, ctx: NodeContext, auth: dict[str, Any], symbol: str, modules: str) -> dict[str, Any]:
        data = await self.request_json(ctx, "GET", f"/v10/finance/quoteSummary/{symbol}", params={
            "modules": modules, "corsDomain": "finance.yahoo.com", "formatted": "false", "symbol": symbol,
            **auth["params"]}, headers=auth["headers"])
        block = data.get("quoteSummary") if isinstance(data, dict) else None
        result = (block or {}).get("result") or []
        if not result:
            error = (block or {}).get("error") or {}
            raise RuntimeError(f"{ctx.component_id}: Yahoo Finance: {error.get('description') or 'no data'} for {symbol}")
        return result[0]

    async def _history(self, ctx: NodeContext, auth: dict[str, Any], symbol: str) -> str:
        data = await self.request_json(ctx, "GET", f"/v8/finance/chart/{symbol}", params={
            "range": "1mo", "interval": "1d", "includePrePost": "false", "events": "div,splits", **auth["params"]},
            headers=auth["headers"])
        result = (((data.get("chart") or {}).get("result") or [None])[0] if isinstance(data, dict) else None) or {}
        quote_ = ((result.get("indicators") or {}).get("quote") or [{}])[0]
        cols = ["open", "high", "low", "close", "volume"]
        rows = [[_date(t), *((quote_.get(c) or [None] * (i + 1))[i] for c in cols)]
                for i, t in enumerate(result.get("timestamp") or [])]
        return table(["Date", "Open", "High", "Low", "Close", "Volume"], rows)

    async def _statement(self, ctx: NodeContext, auth: dict[str, Any], symbol: str, scale: str,
                         keys: tuple[str, ...]) -> str:
        data = await self.request_json(ctx, "GET", f"/ws/fundamentals-timeseries/v1/finance/timeseries/{symbol}",
                                       params={"symbol": symbol, "type": ",".join(scale + k for k in keys),
                                               "period1": 1483142400, "period2": int(time.time()) + 86400,
                                               **auth["params"]}, headers=auth["headers"])
        series: dict[str, dict[str, Any]] = {}
        for item in ((data.get("timeseries") or {}).get("result") or []) if isinstance(data, dict) else []:
            for name in (item.get("meta") or {}).get("type") or []:
                values = {p["asOfDate"]: (p.get("reportedValue") or {}).get("raw")
                          for p in item.get(name) or [] if isinstance(p, dict) and p.get("asOfDate")}
                if values:
                    series[name.removeprefix(scale)] = values
        dates = sorted({d for v in series.values() for d in v}, reverse=True)
        return table(["", *dates], [[title_case(k), *(v.get(d) for d in dates)] for k in keys if (v := series.get(k))])


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (as pandas' to_markdown lays out a DataFrame)."""
    def cell(v: Any) -> str:
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(":---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def title_case(key: str) -> str:
    """yfinance's row labels: "TotalAssets" -> "Total Assets", "NetPPE" -> "Net PPE"."""
    return _CAMEL.sub(" ", key)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k} "))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _date(v: Any) -> Any:
    """Epoch seconds as an ISO date (Yahoo's timestamps); anything else as it is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 10**8:
        return datetime.fromtimestamp(v, timezone.utc).strftime("%Y-%m-%d")
    return v
