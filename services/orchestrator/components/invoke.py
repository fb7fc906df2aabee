"""Invoke: call an HTTP endpoint and output the response text.

Params (RAGFlow `agent/component/invoke.py`): `url` (required; `{refs}` expanded; "http://" added
when there is no scheme), `method` ("get" | "post" | "put"), `headers` (a JSON object as a string;
`{name}` placeholders in its values are resolved: `{env.key}`, `{cpn@var}`, or the bare name of an
argument in `variables`, else of an `env.` variable), `variables` (the arguments:
`[{"key", "ref"?, "value"?}]`; sent as the query string for GET, as a JSON body or a form for
POST/PUT according to `datatype` "json" | "formdata"; in JSON mode a string holding JSON is sent as
that JSON), `proxy`, `timeout` (seconds, default 60), `clean_html` (reduce an HTML answer to text).
Output `result`: the body as text, whatever the status code (as in RAGFlow).

Every request goes through `http_client.OutboundHttp`: the SSRF guard refuses private, loopback,
link-local, multicast and reserved addresses unless the engine's `ssrf_allowlist` lets them through,
and redirects are not followed. Retries are the runner's (`max_retries`, `delay_after_error`), not
done a second time here.
"""
from __future__ import annotations

import asyncio
import json
import re
from contextlib import AsyncExitStack
from typing import Annotated, Any

import aiohttp
import html_text
from pydantic import Field

from services.orchestrator.components._fields import FieldError, as_bool, type_name
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, Params, validator
from services.orchestrator.egress.http import EgressBlocked, EgressPolicy, HttpResponse, OutboundHttp, ResponseTooLarge
from services.orchestrator.engine.variables import StreamValue, to_jsonable, to_text

METHODS = ("get", "post", "put")
DATATYPES = ("json", "formdata")
# RAGFlow's header placeholder pattern: plain {token} as well as {env.x} / {cpn@var}.
HEADER_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_.@-]*)\}")
_EMPTY_PROXY = re.compile(r"https?:?/?/?")


def _timeout(raw: Any) -> float | None:
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _url(url: Any) -> Any:
    if not isinstance(url, str) or not url.strip():
        raise ValueError("is required (the endpoint URL)")
    return url


def _method(method: Any) -> Any:
    if str(method or "get").lower() not in METHODS:
        raise ValueError(f"must be one of {', '.join(METHODS)}, got {method!r}")
    return method


def _datatype(datatype: Any) -> Any:
    if str(datatype or "json").lower() not in DATATYPES:
        raise ValueError(f"must be 'json' or 'formdata', got {datatype!r}")
    return datatype


def _seconds(raw: Any) -> Any:
    if _timeout(raw) is None:
        raise ValueError(f"must be a positive number of seconds, got {raw!r}")
    return raw


def _headers(headers: Any) -> Any:
    if not headers or isinstance(headers, dict):
        return headers
    if not isinstance(headers, str):
        raise ValueError("must be a JSON object (as a string)")
    try:
        parsed = json.loads(headers)
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError("must be a JSON object")
    return headers


def _key(key: Any) -> Any:
    if not str(key or "").strip():
        raise ValueError("is required")
    return key


class Argument(Entry):
    key: Annotated[Any, validator(_key), Field(validate_default=True)] = None
    ref: Any = None  # a reference whose value is sent
    value: Any = None  # else this text ({refs} expanded)


class InvokeParams(Params):
    url: Annotated[Any, validator(_url), Field(validate_default=True)] = None
    method: Annotated[Any, validator(_method)] = "get"
    datatype: Annotated[Any, validator(_datatype)] = "json"
    timeout: Annotated[Any, validator(_seconds)] = 60
    headers: Annotated[Any, validator(_headers)] = None  # a JSON object, as text or not
    variables: list[Argument] | None = None
    proxy: Any = None
    clean_html: Any = False


def _form_pairs(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Query-string / form encoding as `requests` does it: None dropped, lists repeated."""
    pairs: list[tuple[str, str]] = []
    for key, value in args.items():
        for item in value if isinstance(value, list) else [value]:
            if item is None:
                continue
            if isinstance(item, (dict, list)):
                item = json.dumps(item, ensure_ascii=False)
            pairs.append((key, item if isinstance(item, str) else str(item)))
    return pairs


def _json_arg(cid: str, key: str, value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise FieldError(cid, "params.variables", f"argument '{key}' is not JSON-serializable "
                                                  f"({type_name(value)})") from None
    return value


def html_to_text(html: str) -> str:
    """Readable text of an HTML page (scripts and styles dropped, blocks on their own lines)."""
    return html_text.extract_text(html, guess_layout=True)


@register
class Invoke(Component):
    component_name = "Invoke"
    params_model = InvokeParams
    params: InvokeParams

    @classmethod
    def tool_meta(cls, params: InvokeParams) -> dict[str, Any]:
        """As an Agent tool, the model fills the keys of `variables`."""
        keys = [v.key for v in params.variables or ()]
        return {"name": "invoke", "description": "Calls an HTTP endpoint and returns the response.",
                "parameters": {k: {"type": "string", "required": False, "description": k} for k in keys}}

    def tool_params(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The model's arguments become the values of the `variables` with their keys."""
        variables = [{"key": v.key, "value": arguments[v.key]} if v.key in arguments else v.as_dict()
                     for v in self.params.variables or ()]
        return {**self.params.as_dict(), "variables": variables}

    def thoughts(self, ctx: NodeContext) -> str:
        return "Waiting for the server respond..."

    async def run(self, ctx: NodeContext) -> None:
        cid, p = ctx.component_id, self.params
        method = str(p.method or "get").lower()
        json_mode = str(p.datatype or "json").lower() == "json"
        timeout_s = _timeout(p.timeout) or 60.0

        args = await self._arguments(ctx, json_mode)
        url = (await ctx.render(p.url.strip())).strip()
        if "://" not in url:
            url = "http://" + url
        headers = await self._headers(ctx, args)
        proxy = self._proxy()
        ctx.set_input("url", url)
        ctx.set_input("method", method)

        kwargs: dict[str, Any] = {}
        if method == "get":
            kwargs["params"] = _form_pairs(args)
        elif json_mode:
            kwargs["json"] = args
        else:
            kwargs["data"] = _form_pairs(args)

        async with AsyncExitStack() as stack:
            http = ctx.http
            if http is None:
                try:
                    policy = EgressPolicy.from_entries(ctx.settings.ssrf_allowlist)
                except ValueError as exc:
                    raise RuntimeError(f"{cid}: engine setting ssrf_allowlist: {exc}") from None
                http = await stack.enter_async_context(OutboundHttp(policy))
            response = await self._send(ctx, http, method, url, headers, proxy, timeout_s, kwargs)
        text = response.text
        if as_bool(p.clean_html):
            text = await asyncio.to_thread(html_to_text, text)  # lxml parsing: off the event loop
        ctx.set_output("result", text)

    async def _send(self, ctx: NodeContext, http: OutboundHttp, method: str, url: str,
                    headers: dict[str, str], proxy: str | None, timeout_s: float,
                    kwargs: dict[str, Any]) -> HttpResponse:
        cid = ctx.component_id
        try:
            return await http.request(method, url, headers=headers, proxy=proxy, timeout_s=timeout_s, **kwargs)
        except EgressBlocked as exc:
            field = "params.proxy" if proxy and exc.url == proxy else "params.url"
            raise FieldError(cid, field, str(exc)) from None
        except TimeoutError:
            # A TimeoutError, so the runner reports it with code "timeout".
            raise TimeoutError(f"{cid}: params.timeout: no complete response from {url} "
                               f"within {timeout_s:g}s") from None
        except ValueError as exc:  # bad scheme, no host, invalid header value
            raise FieldError(cid, "params.url", str(exc)) from None
        except ResponseTooLarge as exc:
            raise RuntimeError(f"{cid}: {exc}") from None
        except aiohttp.ClientError as exc:
            raise RuntimeError(f"{cid}: HTTP {method.upper()} {url} failed: {exc or type(exc).__name__}") from None

    async def _arguments(self, ctx: NodeContext, json_mode: bool) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for para in self.params.variables or ():
            key = str(para.key).strip()
            ref = str(para.ref or "").strip()
            raw = ctx.get(ref) if ref and ctx.is_ref(ref) else None
            if isinstance(raw, StreamValue):
                raw = await raw.wait()
            if raw is not None:
                value = raw
            elif para.value is not None:
                value = para.value
                if isinstance(value, str):
                    value = await ctx.render(value)
            else:
                value = ""
            if json_mode:
                value = _json_arg(ctx.component_id, key, value)
            args[key] = value
            if ref:
                ctx.set_input(ref, to_jsonable(value))
        return args

    async def _headers(self, ctx: NodeContext, args: dict[str, Any]) -> dict[str, str]:
        raw = self.params.headers
        if not raw:
            return {}
        parsed = raw if isinstance(raw, dict) else json.loads(raw)
        headers: dict[str, str] = {}
        for key, value in parsed.items():
            if isinstance(value, str):
                value = await self._fill_placeholders(ctx, value, args)
            elif value is None:
                continue
            else:
                value = to_text(value)
            if "\n" in value or "\r" in value:
                raise FieldError(ctx.component_id, "params.headers", f"value of header '{key}' contains a line break")
            headers[str(key)] = value
        return headers

    @staticmethod
    async def _fill_placeholders(ctx: NodeContext, text: str, args: dict[str, Any]) -> str:
        out: list[str] = []
        pos = 0
        for m in HEADER_PLACEHOLDER.finditer(text):
            name = m.group(1)
            if ctx.is_ref(name):
                value = await ctx.value(name)
            elif name in args:
                value = args[name]
            else:
                value = ctx.get_global(f"env.{name}", ctx.get_global(name))
            out.append(text[pos:m.start()])
            out.append(to_text(value))  # None -> "" (as RAGFlow), containers as JSON
            pos = m.end()
        out.append(text[pos:])
        return "".join(out)

    def _proxy(self) -> str | None:
        proxy = self.params.proxy
        if not isinstance(proxy, str) or not _EMPTY_PROXY.sub("", proxy).strip():
            return None
        proxy = proxy.strip()
        return proxy if "://" in proxy else "http://" + proxy
