"""The base of RAGFlow's tools that call a web API: params, keys, base URL, HTTP, outputs, references.

A tool is a component with RAGFlow's `component_name` that runs two ways:
- as an Agent tool: `call_tool(ctx, arguments)` with the model's arguments, returning the observation;
- as a plain canvas node: `run(ctx)`, its arguments taken from its params (a bare reference such as
  "sys.query" or "iterationitem:0@result" is resolved, text with {refs} is rendered), as RAGFlow does.
Both end in the subclass's `async invoke(ctx, args)`, which returns the observation (text; a list or a
dict reaches the model as JSON). As an Agent tool, the arguments the model leaves out come from the params.

Writing one (tavily.py is the complete example; docs/tools.md says how tools behave for users):

    @register
    class TavilySearch(WebTool):
        component_name = "TavilySearch"       # RAGFlow's component_name
        service = "TAVILY"                    # TRELLIS_TAVILY_BASE_URL, TRELLIS_TAVILY_TIMEOUT_S, TAVILY_API_KEY
        base_url = "https://api.tavily.com"   # the public service
        meta = {...}                          # RAGFlow's ToolMeta, verbatim: name, description, parameters
        defaults = {"max_results": 6, ...}    # RAGFlow's other params and their defaults
        choices = {"topic": ("general", "news")}

        async def invoke(self, ctx, args):
            data = await self.request_json(ctx, "POST", "/search", json={"query": args["query"], ...},
                                           headers={"Authorization": f"Bearer {self.api_key(ctx)}"})
            add_references(ctx, data["results"], title=lambda r: r["title"], url=lambda r: r["url"],
                           content=lambda r: r["content"])
            ctx.set_output("json", data["results"])
            return ctx.output("formalized_content")

Unlike the rest of the engine (whose settings come in `EngineSettings`), a tool reads its own variables
(key, base URL, time limit) from the orchestrator's environment when it runs: one family per service, as
open-ended as the list of tools.

Params: the class's `params_model` is made from `meta` (its parameters), `defaults`, `choices` and `positive`
(each a field with its default; a value outside `choices`, or not a positive integer, is a validation
issue), on top of `WebParams` or the `params_model` a tool declares for checks of its own (email.py).
`self.option(args, name)`: the model's argument, else the DSL's param, else the default.
`self.api_key(ctx)`: `params.api_key` when set (RAGFlow's way), else `<SERVICE>_API_KEY` from the environment.
`self.request_json` / `self.request_text`: through the engine's one outbound client (`http_client.py`: the
SSRF guard with `TRELLIS_SSRF_ALLOWLIST`, no redirects, bounded bodies), at `TRELLIS_<SERVICE>_BASE_URL`
(else `base_url`), within `TRELLIS_<SERVICE>_TIMEOUT_S` (else `timeout_s`); connection failures and HTTP
429/5xx answers are retried twice. Failures raise an error naming the component and the service: as an
Agent tool the model then sees "Error: ...", as a node the runner's `exception_method` applies.
`add_references(...)`: RAGFlow's `ToolBase._retrieve_chunks`: the results become the run's references
(sent with `message_end`) and the `formalized_content` output (citable "ID: n" blocks).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from contextlib import asynccontextmanager
from typing import Annotated, Any, AsyncIterator, Callable, ClassVar

import aiohttp
from pydantic import create_model

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.components.params import Params, validator
from services.orchestrator.components.retrieval import hash_str2int
from services.orchestrator.egress.http import EgressBlocked, EgressPolicy, HttpResponse, OutboundHttp, ResponseTooLarge
from services.orchestrator.engine.variables import StreamValue, parse_ref, to_jsonable

log = logging.getLogger(__name__)

# RAGFlow's thoughts() texts that several tools share (a tool's `thought`).
SEARCHING = "\nKeywords: {}\nLooking for the most relevant articles.\n"
SCHOLARLY = "Looking for scholarly papers on `{}`,” prioritising reputable sources."
MARKET_DATA = "Pulling live financial data for `{}`."

RETRIES = 2  # extra attempts after a connection failure or an HTTP 429/5xx answer
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_WAIT_S = 5.0
MAX_CHUNK_CHARS = 10_000  # RAGFlow keeps the first 10,000 characters of each result
_INLINE_IMAGE = re.compile(r"!?\[[a-z]+\]\(data:image/png;base64,[ 0-9A-Za-z/_=+-]+\)")
_PLACEHOLDER_KEY = re.compile(r"^\s*(YOUR[_ ]|<)", re.IGNORECASE)  # "YOUR_API_KEY (obtained from ...)"

Getter = Callable[[dict[str, Any]], Any]


class WebParams(Params):
    api_key: Any = None  # else <SERVICE>_API_KEY


def _choice(allowed: tuple[Any, ...]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in allowed and not (isinstance(value, str) and "@" in value):  # a reference: checked when read
            raise ValueError(f"must be one of {', '.join(map(str, allowed))}, got {value!r}")
        return value
    return check


def _positive(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or not _is_positive_int(value):
        raise ValueError(f"must be a positive integer, got {value!r}")
    return value


def make_params_model(tool: type[WebTool]) -> type[Params]:
    """The tool's params: a field per meta argument, default, choice and positive param, with its default."""
    base = tool.__dict__.get("params_model") or WebParams
    fields: dict[str, Any] = {}
    for name in dict.fromkeys([*tool.meta.get("parameters", {}), *tool.defaults, *tool.choices, *tool.positive]):
        if name in base.model_fields:
            continue
        check = _choice(tool.choices[name]) if name in tool.choices else _positive if name in tool.positive else None
        fields[name] = (Annotated[Any, validator(check)] if check else Any, tool.default(name))
    return create_model(f"{tool.__name__}Params", __base__=base, __module__=tool.__module__, **fields)


class WebTool(Component):
    """A RAGFlow tool backed by an HTTP API (see the module docstring)."""

    exception_output = "formalized_content"
    meta: ClassVar[dict[str, Any]] = {}  # RAGFlow ToolMeta: {"name", "description", "parameters"}
    defaults: ClassVar[dict[str, Any]] = {}  # RAGFlow's params besides the meta arguments
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {}  # param -> allowed values (checked at validation)
    positive: ClassVar[tuple[str, ...]] = ()  # params that must be positive integers
    service: ClassVar[str] = ""  # env prefix: TRELLIS_<service>_BASE_URL, <service>_API_KEY
    base_url: ClassVar[str] = ""
    hosts: ClassVar[dict[str, str]] = {}  # other hosts of the service (see `endpoint`)
    timeout_s: ClassVar[float] = 12.0  # RAGFlow's tool time limit
    needs_key: ClassVar[bool] = True
    thought: ClassVar[str] = ""  # RAGFlow's thoughts() text, "{}" = the argument `thought_arg` (see `shown`)
    thought_arg: ClassVar[str] = "query"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.component_name and not (callable(getattr(cls, "invoke", None)) and cls.meta and cls.service):
            raise TypeError(f"{cls.__name__}: a web tool needs `meta`, `service` and `async invoke(ctx, args)`")
        if cls.meta:
            cls.params_model = make_params_model(cls)

    # ------------------------------------------------------------------ what the model sees
    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {"name": cls.meta["name"], "description": cls.meta["description"].strip(),
                "parameters": cls.meta["parameters"]}

    @classmethod
    def default(cls, name: str) -> Any:
        if name in cls.defaults:
            return cls.defaults[name]
        return (cls.meta.get("parameters", {}).get(name) or {}).get("default")

    def thoughts(self, ctx: NodeContext) -> str:
        if self.thought:
            return self.thought.format(self.shown(ctx, self.thought_arg))
        return f"{ctx.env.display.get(ctx.component_id, self.component_name)} is running..."

    def shown(self, ctx: NodeContext, name: str) -> Any:
        """An argument for `thoughts`: what the node resolved, else its param (a reference's value), else "-_-!"."""
        if ctx.inputs.get(name) not in (None, ""):
            return ctx.inputs[name]
        raw = self.params.given(name)
        value = ctx.get(raw.strip()) if is_reference(ctx, raw) else raw
        return value if isinstance(value, (str, int, float, list)) and value not in ("", []) else "-_-!"

    # ------------------------------------------------------------------ the two ways in
    async def run(self, ctx: NodeContext) -> None:
        await self._call(ctx, await self.arguments_from_params(ctx))

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> Any:
        """The model's arguments win; those it leaves out come from the DSL's params."""
        args = await self.arguments_from_params(ctx)
        args.update({k: v for k, v in arguments.items() if v not in (None, "")})
        return await self._call(ctx, args)

    async def arguments_from_params(self, ctx: NodeContext) -> dict[str, Any]:
        """The meta arguments as a canvas node gets them: params (else defaults), references resolved."""
        args = {}
        for name in self.meta.get("parameters", {}):
            raw = getattr(self.params, name)
            if is_reference(ctx, raw):
                raw = await ctx.value(raw.strip())
            elif isinstance(raw, str) and ctx.refs(raw):
                raw = await ctx.render(raw)
            if isinstance(raw, StreamValue):
                raw = await raw.wait()
            args[name] = raw
        return args

    async def _call(self, ctx: NodeContext, args: dict[str, Any]) -> Any:
        for name, value in args.items():
            ctx.set_input(name, to_jsonable(value))
        ctx.set_output("formalized_content", "")
        return await self.invoke(ctx, args)  # type: ignore[attr-defined]  # every subclass has one

    # ------------------------------------------------------------------ params, key, endpoint
    def option(self, args: dict[str, Any], name: str) -> Any:
        """The model's argument, else the DSL's param, else RAGFlow's default."""
        if args.get(name) not in (None, ""):
            return args[name]
        return getattr(self.params, name, self.default(name))

    def api_key(self, ctx: NodeContext, env: str | None = None) -> str:
        """`params.api_key` when it holds a key, else `<SERVICE>_API_KEY`; an error naming both otherwise."""
        key = self.params.api_key
        if isinstance(key, str) and key.strip() and not _PLACEHOLDER_KEY.match(key):
            return key.strip()
        env = env or f"{self.service}_API_KEY"
        key = os.environ.get(env, "").strip()
        if not key and self.needs_key:
            raise FieldError(ctx.component_id, "params.api_key", f"no {self.component_name} API key: set it in the "
                                                                 f"component's api_key or in {env}")
        return key

    def endpoint(self, path: str = "", *, host: str = "", **fill: str) -> str:
        """`TRELLIS_<SERVICE>_BASE_URL` (else `base_url`) + path. A service on several hosts names the
        others in `hosts` ({"HTML": "https://html.duckduckgo.com"}): `host="HTML"` reads
        `TRELLIS_<SERVICE>_HTML_BASE_URL`. `{placeholders}` in the base are filled from `fill`."""
        env = f"TRELLIS_{self.service}_{host}_BASE_URL" if host else f"TRELLIS_{self.service}_BASE_URL"
        base = os.environ.get(env, "").strip() or (self.hosts[host] if host else self.base_url)
        if fill:
            base = base.format(**fill)
        return base.rstrip("/") + path

    def time_limit(self) -> float:
        raw = os.environ.get(f"TRELLIS_{self.service}_TIMEOUT_S", "").strip()
        try:
            value = float(raw) if raw else self.timeout_s
        except ValueError:
            value = self.timeout_s
        return value if value > 0 else self.timeout_s

    # ------------------------------------------------------------------ HTTP
    async def request_json(self, ctx: NodeContext, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of `method base_url+path` (`path` may be a full URL); errors name the service."""
        resp = await self.request(ctx, method, path, **kwargs)
        try:
            return json.loads(resp.text)
        except ValueError:
            raise RuntimeError(f"{ctx.component_id}: {self.component_name} answered something that is not JSON: "
                               f"{resp.text[:200]!r}") from None

    async def request_text(self, ctx: NodeContext, method: str, path: str, **kwargs: Any) -> str:
        return (await self.request(ctx, method, path, **kwargs)).text

    async def request(self, ctx: NodeContext, method: str, path: str, *, params: Any = None, json: Any = None,
                      data: Any = None, headers: dict[str, str] | None = None,
                      check_status: bool = True) -> HttpResponse:
        cid, name = ctx.component_id, self.component_name
        url = path if "://" in path else self.endpoint(path)
        limit = self.time_limit()
        async with _client(ctx) as http:
            for attempt in range(RETRIES + 1):
                wait = 0.5 * 2 ** attempt
                try:
                    resp = await http.request(method, url, params=params, json=json, data=data, headers=headers,
                                              timeout_s=limit)
                except EgressBlocked as exc:
                    raise FieldError(cid, f"TRELLIS_{self.service}_BASE_URL", str(exc)) from None
                except TimeoutError:
                    raise TimeoutError(f"{cid}: {name} did not answer within {limit:g} s "
                                       f"({method} {_no_query(url)})") from None
                except ValueError as exc:  # bad scheme, no host
                    raise FieldError(cid, f"TRELLIS_{self.service}_BASE_URL", str(exc)) from None
                except ResponseTooLarge as exc:
                    raise RuntimeError(f"{cid}: {exc}") from None
                except aiohttp.ClientError as exc:
                    if attempt < RETRIES:
                        log.info("%s: %s %s failed (%s); retrying", cid, method, _no_query(url), exc)
                        await asyncio.sleep(wait)
                        continue
                    raise RuntimeError(f"{cid}: {name}: {method} {_no_query(url)} failed: "
                                       f"{exc or type(exc).__name__}") from None
                if resp.status in RETRY_STATUSES and attempt < RETRIES:
                    log.info("%s: %s answered HTTP %d; retrying", cid, name, resp.status)
                    await asyncio.sleep(_retry_after(resp, wait))
                    continue
                if resp.status >= 400 and check_status:
                    raise RuntimeError(f"{cid}: {name} answered HTTP {resp.status}: {_excerpt(resp.text)}")
                return resp
        raise AssertionError("unreachable")  # the loop returns or raises


@asynccontextmanager
async def _client(ctx: NodeContext) -> AsyncIterator[OutboundHttp]:
    """The engine's shared client, or one for this call built from the engine's SSRF allow-list."""
    if ctx.http is not None:
        yield ctx.http
        return
    try:
        policy = EgressPolicy.from_entries(ctx.settings.ssrf_allowlist)
    except ValueError as exc:
        raise RuntimeError(f"{ctx.component_id}: engine setting ssrf_allowlist: {exc}") from None
    async with OutboundHttp(policy) as http:
        yield http


def _retry_after(resp: HttpResponse, fallback: float) -> float:
    try:
        return min(float(resp.headers.get("Retry-After", "")), MAX_RETRY_WAIT_S)
    except ValueError:
        return fallback


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _no_query(url: str) -> str:
    """The URL without its query string, which may carry a key."""
    return url.split("?", 1)[0]


def is_reference(ctx: NodeContext, raw: Any) -> bool:
    """Whether a param is a bare reference ("sys.query", "Agent:a@content") rather than text. Text that reads
    like `name@rest` but names no component of the canvas ("ann@mail.example", an email address) is text."""
    if not isinstance(raw, str) or not ctx.is_ref(raw.strip()):
        return False
    parsed = parse_ref(raw.strip())
    known = ctx.env.known
    return parsed is None or parsed[0] != "cpn" or "{" in raw or known is None or parsed[1] in known


def _is_positive_int(value: Any) -> bool:
    try:
        return int(float(value)) >= 1
    except (TypeError, ValueError, OverflowError):
        return False


# ---------------------------------------------------------------------- references
def add_references(ctx: NodeContext, results: list[Any], *, title: Getter, url: Getter, content: Getter,
                   score: Getter | None = None) -> list[dict[str, Any]]:
    """RAGFlow's `_retrieve_chunks`: results -> the run's references and the `formalized_content` output.

    Each result with content becomes a chunk whose id is the hash of its content; the chunks are added to
    the run's references (RAGFlow `Canvas.add_reference`: `{"chunks": {citation id: chunk}, "doc_aggs":
    {title: {doc_name, doc_id, count, url}}}`), and `formalized_content` lists them as RAGFlow's kb_prompt
    does ("ID: n", Title, URL, Content), so the model can cite them. Returns the chunks.
    """
    chunks, aggs = [], []
    for r in results:
        if not isinstance(r, dict):
            continue
        text = _INLINE_IMAGE.sub("", str(content(r) or ""))[:MAX_CHUNK_CHARS]
        if not text:
            continue
        cid = str(hash_str2int(text))
        name, link = str(title(r) or ""), url(r)
        chunks.append({"id": cid, "content": text, "document_id": cid, "document_name": name, "dataset_id": None,
                       "image_id": None, "positions": None, "url": link,
                       "similarity": score(r) if score else 1, "vector_similarity": None, "term_similarity": None,
                       "row_id": None, "doc_type": None, "document_metadata": None})
        aggs.append({"doc_name": name, "doc_id": cid, "count": 1, "url": link})
    _record(ctx, chunks, aggs)
    ctx.set_output("formalized_content", "\n".join(_kb_block(c) for c in chunks))
    return chunks


def _record(ctx: NodeContext, chunks: list[dict[str, Any]], aggs: list[dict[str, Any]]) -> None:
    state = ctx.env.state
    if state is None or not chunks:
        return
    if not isinstance(state.retrieval, list) or not state.retrieval or not isinstance(state.retrieval[-1], dict):
        state.retrieval = [*(state.retrieval if isinstance(state.retrieval, list) else []), {"chunks": {}, "doc_aggs": {}}]
    ref = state.retrieval[-1]
    ref_chunks = ref.setdefault("chunks", {})
    for ck in chunks:
        ref_chunks.setdefault(str(hash_str2int(ck["id"])), ck)
    doc_aggs = ref.setdefault("doc_aggs", {})
    for agg in aggs:
        doc_aggs.setdefault(agg["doc_name"], agg)


def _draw(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return f"\n├── {key}: " + re.sub(r"\n+", " ", text) if text else ""


def _kb_block(ck: dict[str, Any]) -> str:
    return (f"\nID: {hash_str2int(ck['id'])}" + _draw("Title", ck["document_name"]) + _draw("URL", ck["url"])
            + "\n└── Content:\n" + ck["content"])
