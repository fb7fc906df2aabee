from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.invoke import Invoke
from services.orchestrator.components.params import ParamsInvalid
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from services.orchestrator.engine.settings import EngineSettings, Services

LOOPBACK_ALLOWED = EngineSettings(ssrf_allowlist=("127.0.0.1/32",))


class Upstream:
    """A real HTTP server on 127.0.0.1:0 that records what it received."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.port = 0
        self.release = asyncio.Event()

    async def echo(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        body: Any = None
        if request.content_type == "application/json":
            body = await request.json()
        elif request.content_type == "application/x-www-form-urlencoded":
            body = {k: v for k, v in (await request.post()).items()}
        return web.json_response({
            "method": request.method, "query": [[k, v] for k, v in request.query.items()], "body": body,
            "host": request.host, "url": str(request.url),
            "auth": request.headers.get("Authorization"), "x_token": request.headers.get("X-Token"),
        })

    async def slow(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        await asyncio.wait_for(self.release.wait(), 10)  # released at teardown
        return web.Response(text="too late")

    async def html(self, request: web.Request) -> web.Response:
        return web.Response(content_type="text/html", text=(
            "<html><head><title>Page</title><style>p{color:red}</style><script>var x = 1;</script></head>"
            "<body><h1>Hello</h1><p>World <b>bold</b></p><ul><li>one</li><li>two</li></ul></body></html>"))

    async def redirect(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(status=302, headers={"Location": "/echo"}, text="moved")

    async def not_found(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="no such thing")

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()
    app = web.Application()
    app.router.add_route("*", "/echo", up.echo)
    app.router.add_get("/slow", up.slow)
    app.router.add_get("/html", up.html)
    app.router.add_get("/redirect", up.redirect)
    app.router.add_get("/missing", up.not_found)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield up
    up.release.set()
    await runner.cleanup()


class FakeDns(AbstractResolver):
    """DNS at the edge of the world: fixed answers, and a count of lookups."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        self.lookups.append(host)
        if host not in self.answers:
            raise OSError(f"no such host {host}")
        return [{"hostname": host, "host": ip, "port": port, "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                 "proto": 0, "flags": 0} for ip in self.answers[host]]

    async def close(self) -> None:
        pass


async def invoke(params: dict[str, Any], *, settings: EngineSettings = LOOPBACK_ALLOWED,
                 http: OutboundHttp | None = None, globals_: dict[str, Any] | None = None,
                 outputs: dict[str, dict[str, Any]] | None = None) -> NodeContext:
    ctx = NodeContext.for_test(params, component_id="Invoke:T", component_name="Invoke", globals_=globals_,
                               outputs=outputs, services=Services(settings=settings, http=http))
    await Invoke("Invoke:T", params).run(ctx)
    return ctx


async def result_json(params: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return json.loads((await invoke(params, **kw)).output("result"))


async def test_get_sends_arguments_as_query_and_resolves_header_placeholders(upstream: Upstream) -> None:
    got = await result_json(
        {"url": upstream.url("/echo?fixed=1"), "method": "get",
         "headers": '{"Authorization": "Bearer {env.token}", "X-Token": "{token}-{begin@suffix}"}',
         "variables": [{"key": "q", "ref": "sys.query"}, {"key": "token", "value": "tok"},
                       {"key": "n", "value": 3}, {"key": "none", "ref": "Gone:x@y"}]},
        globals_={"sys.query": "what is up", "env.token": "s3cret"}, outputs={"begin": {"suffix": "z"}})
    assert got["method"] == "GET"
    assert got["query"] == [["fixed", "1"], ["q", "what is up"], ["token", "tok"], ["n", "3"], ["none", ""]]
    assert got["auth"] == "Bearer s3cret"
    assert got["x_token"] == "tok-z"


async def test_post_json_decodes_json_string_arguments(upstream: Upstream) -> None:
    got = await result_json(
        {"url": upstream.url("/echo"), "method": "post", "datatype": "json",
         "variables": [{"key": "payload", "value": '{"a": [1, 2]}'}, {"key": "text", "value": "plain={sys.query}"},
                       {"key": "obj", "ref": "Src:x@obj"}]},
        globals_={"sys.query": "Q"}, outputs={"Src:x": {"obj": {"k": "v"}}})
    assert got["method"] == "POST"
    assert got["body"] == {"payload": {"a": [1, 2]}, "text": "plain=Q", "obj": {"k": "v"}}


async def test_put_formdata(upstream: Upstream) -> None:
    got = await result_json({"url": upstream.url("/echo"), "method": "PUT", "datatype": "formdata",
                             "variables": [{"key": "a", "value": "1"}, {"key": "b", "value": "two words"}]})
    assert got["method"] == "PUT"
    assert got["body"] == {"a": "1", "b": "two words"}


async def test_url_references_are_expanded_and_scheme_is_added(upstream: Upstream) -> None:
    got = await result_json({"url": f"127.0.0.1:{upstream.port}/echo?id={{begin@id}}"},
                            outputs={"begin": {"id": "42"}})
    assert got["query"] == [["id", "42"]]


async def test_error_status_still_returns_the_body(upstream: Upstream) -> None:
    ctx = await invoke({"url": upstream.url("/missing")})
    assert ctx.output("result") == "no such thing"


async def test_timeout_fails_naming_the_timeout_field(upstream: Upstream) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError, match=r"^Invoke:T: params.timeout: no complete response from .*/slow within 0.3s"):
        await invoke({"url": upstream.url("/slow"), "timeout": 0.3})
    assert loop.time() - started < 10  # gave up at its timeout: /slow answers only after 10 s


async def test_clean_html_returns_readable_text(upstream: Upstream) -> None:
    raw = (await invoke({"url": upstream.url("/html")})).output("result")
    assert "<h1>" in raw
    text = (await invoke({"url": upstream.url("/html"), "clean_html": True})).output("result")
    assert "<" not in text and "var x" not in text and "color:red" not in text
    assert [line for line in text.splitlines() if line.strip()] == ["Page", "Hello", "World bold", "one", "two"]


async def test_redirects_are_not_followed(upstream: Upstream) -> None:
    ctx = await invoke({"url": upstream.url("/redirect")})
    assert ctx.output("result") == "moved"
    assert upstream.hits == ["/redirect"]


async def test_loopback_is_refused_by_default_naming_component_and_url(upstream: Upstream) -> None:
    for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
        with pytest.raises(FieldError) as err:
            await invoke({"url": upstream.url("/echo", host)}, settings=EngineSettings())
        message = str(err.value)
        assert message.startswith("Invoke:T: params.url: refused to reach http://")
        assert "loopback address" in message
    assert upstream.hits == []


async def test_loopback_is_allowed_when_configured(upstream: Upstream) -> None:
    for allow in (("127.0.0.0/8",), ("localhost",)):
        got = await result_json({"url": upstream.url("/echo", "localhost")},
                                settings=EngineSettings(ssrf_allowlist=allow))
        assert got["method"] == "GET"
    assert upstream.hits == ["/echo", "/echo"]


@pytest.mark.parametrize(("answer", "reason"), [
    (["10.1.2.3"], "private"), (["169.254.169.254"], "link-local"), (["224.0.0.1"], "multicast"),
    (["240.0.0.1"], "reserved"), (["93.184.216.34", "192.168.1.5"], "private"), (["fd00::1"], "private"),
    (["0.0.0.0"], "unspecified"),
])
async def test_a_hostname_resolving_to_a_non_public_address_is_refused(answer: list[str], reason: str) -> None:
    dns = FakeDns({"internal.example": answer})
    async with OutboundHttp(EgressPolicy(), resolver=dns) as http:
        with pytest.raises(FieldError) as err:
            await invoke({"url": "http://internal.example/admin"}, settings=EngineSettings(), http=http)
    assert str(err.value).startswith("Invoke:T: params.url: refused to reach http://internal.example/admin")
    assert f"is a {reason} address" in str(err.value)
    assert dns.lookups == ["internal.example"]


async def test_the_checked_address_is_the_one_connected_to(upstream: Upstream) -> None:
    # One lookup per request, and the connection goes to the vetted answer: a rebinding DNS has
    # no second lookup to answer differently. The Host header still names the original host.
    dns = FakeDns({"pinned.test": ["127.0.0.1"]})
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"]), resolver=dns) as http:
        got = await result_json({"url": upstream.url("/echo", "pinned.test")}, http=http)
    assert got["host"] == f"pinned.test:{upstream.port}"
    assert dns.lookups == ["pinned.test"]


async def test_proxy_goes_through_the_guard_too(upstream: Upstream) -> None:
    dns = FakeDns({"api.example": ["93.184.216.34"]})
    async with OutboundHttp(EgressPolicy(), resolver=dns) as http:
        with pytest.raises(FieldError, match=r"^Invoke:T: params.proxy: refused to reach http://127.0.0.1:\d+"):
            await invoke({"url": "http://api.example/echo", "proxy": f"127.0.0.1:{upstream.port}"},
                         settings=EngineSettings(), http=http)
    # Allowed proxy: the request goes to it, in absolute form, for the (public) target.
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"]), resolver=dns) as http:
        got = await result_json({"url": "http://api.example/echo", "proxy": f"http://127.0.0.1:{upstream.port}"},
                                http=http)
    assert got["host"] == "api.example"
    assert dns.lookups == ["api.example"]  # refused on the proxy literal first; then checked once


async def test_bad_params_are_reported_per_field() -> None:
    issues = Invoke.check("Invoke:T", {"url": "", "method": "delete", "datatype": "xml", "timeout": 0,
                                       "headers": "{not json", "variables": [{"value": 1}]})
    assert [i.field for i in issues] == ["params.url", "params.method", "params.datatype", "params.timeout",
                                        "params.headers", "params.variables[0].key"]
    with pytest.raises(ParamsInvalid, match=r"^Invoke:T \(Invoke\): params.headers: must be a JSON object"):
        await invoke({"url": "http://example.com", "headers": "[1, 2]"})
    with pytest.raises(FieldError, match="^Invoke:T: params.url: unsupported URL scheme 'file'"):
        await invoke({"url": "file:///etc/passwd"})
    assert Invoke.check("Invoke:T", {"url": "https://example.com/{begin@q}", "headers": ""}) == []


async def test_blocked_url_error_names_the_component_once(tmp_path):
    from services.orchestrator.engine.dsl import load_canvas
    from services.orchestrator.engine.runner import run
    from services.orchestrator.engine.state import RunRequest
    from services.orchestrator.engine.validate import compile_plan

    dsl = {"components": {
        "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Invoke:Call"], "upstream": []},
        "Invoke:Call": {"obj": {"component_name": "Invoke", "params": {"url": "http://127.0.0.1:9/x"}},
                        "downstream": [], "upstream": ["begin"]}}}
    events = [e async for e in run(compile_plan(load_canvas(dsl)), RunRequest(run_id="r"))]
    error = events[-1].error
    assert error and error.count("Invoke:Call") == 1, error
