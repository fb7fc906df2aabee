"""The Browser's session (Debian's chromium, a local aiohttp site): every connection it makes goes through the
guarded proxy, so a DNS answer that turns private after the check and a redirect to a private host are
refused; a response over the download limit is cut off with a clear reason; an upload's body gets through;
closing cleans up everything even when one step fails. DNS is a stand-in resolver given to OutboundHttp,
not the real DNS."""
from __future__ import annotations

import logging
import os
import socket

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from services.orchestrator.components._browser import BrowserSession
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from tests.support.waiting import eventually

PUBLIC = "93.184.216.34"
PAGE = "<!DOCTYPE html><html><head><title>Harbour café</title></head><body><h1>Open 9-17</h1>{}</body></html>"


class StandInDns(AbstractResolver):
    """Fixed answers per host; `first`: a different answer to a host's first lookup (a rebind after it)."""

    def __init__(self, answers: dict[str, str], first: dict[str, str] | None = None) -> None:
        self.answers, self.first = answers, dict(first or {})
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        self.lookups.append(host)
        ip = self.first.pop(host, None) or self.answers.get(host)
        if ip is None:
            raise OSError(f"no such host {host}")
        return [{"hostname": host, "host": ip, "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass


class Site:
    """The same pages on 127.0.0.1 (allowed in the tests) and on 127.0.0.2 (loopback too, never allowed)."""

    def __init__(self) -> None:
        self.seen: list[str] = []  # "<address the request came to><path>"
        self.ports: dict[str, int] = {}

    def url(self, path: str, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.ports.get(host, self.ports['127.0.0.1'])}{path}"


WS_PAGE = """<script>
const ws = new WebSocket(new URLSearchParams(location.search).get("to"));
ws.onopen = () => { document.title = "ws: open"; };
ws.onerror = () => { document.title = "ws: error"; };
</script>"""


@pytest.fixture
async def site():
    s = Site()

    def saw(request) -> None:
        s.seen.append(request.transport.get_extra_info("sockname")[0] + request.path)

    async def page(request):
        saw(request)
        return web.Response(text=PAGE.format('<a href="/big.bin">Get the archive</a>'), content_type="text/html")

    async def big(request):
        saw(request)
        return web.Response(body=b"x" * 100_000, headers={
            "Content-Type": "application/octet-stream", "Content-Disposition": 'attachment; filename="big.bin"'})

    async def redirect(request):
        saw(request)
        raise web.HTTPFound(request.query["to"])

    async def ws_page(request):
        saw(request)
        return web.Response(text=PAGE.format(WS_PAGE), content_type="text/html")

    async def ws(request):
        saw(request)
        socket_ = web.WebSocketResponse()
        await socket_.prepare(request)
        await socket_.close()
        return socket_

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/big.bin", big)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/ws-page", ws_page)
    app.router.add_get("/ws", ws)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for address in ("127.0.0.1", "127.0.0.2"):
        tcp = web.TCPSite(runner, address, 0)
        await tcp.start()
        s.ports[address] = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield s
    await runner.cleanup()


async def test_a_name_that_turns_private_after_the_check_is_not_reached(site):
    # "localhost": what Chromium would answer by itself, so a browser resolving on its own would get through
    dns = StandInDns({"localhost": "127.0.0.1"}, first={"localhost": PUBLIC})
    async with OutboundHttp(EgressPolicy(), resolver=dns) as http, BrowserSession(http) as browser:
        seen = await browser.go_to_url(site.url("/", host="localhost"))
    assert f"\nRefused: {site.url('/', host='localhost')}: refused to reach localhost: localhost (127.0.0.1) is a " \
           "loopback address" in seen
    assert site.seen == []
    assert dns.lookups.count("localhost") >= 2


async def test_every_redirect_is_checked(site):
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http, BrowserSession(http) as browser:
        ok = await browser.go_to_url(site.url("/redirect?to=/"))
        assert ok.startswith(f"Opened {site.url('/')} (HTTP 200), title: 'Harbour café'")
        private = site.url("/", host="127.0.0.2")
        bad = await browser.go_to_url(site.url(f"/redirect?to={private}"))
    assert f"\nRefused: {private}: refused to reach 127.0.0.2: 127.0.0.2 is a loopback address" in bad
    assert site.seen == ["127.0.0.1/redirect", "127.0.0.1/", "127.0.0.1/redirect"]  # never 127.0.0.2


async def ws_outcome(browser: BrowserSession, page: str) -> str:
    """Open `page` and wait until its script has heard back from its WebSocket: the page's title then."""
    await browser.go_to_url(page)

    async def heard() -> str | None:
        title = (await browser.extract_content()).split("\n")[1]
        return title if title.startswith("Title: ws: ") else None

    return await eventually(heard, what="the page's WebSocket outcome")


async def test_a_websocket_goes_through_the_guard(site):
    allowed, private = site.url("/ws", scheme="ws"), site.url("/ws", host="127.0.0.2", scheme="ws")
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http, BrowserSession(http) as browser:
        assert await ws_outcome(browser, site.url(f"/ws-page?to={allowed}")) == "Title: ws: open"
        assert await ws_outcome(browser, site.url(f"/ws-page?to={private}")) == "Title: ws: error"
    assert browser.refused == [f"127.0.0.2:{site.ports['127.0.0.2']}: refused to reach 127.0.0.2: 127.0.0.2 is a "
                               "loopback address; requests to private, loopback, link-local, multicast and reserved "
                               "addresses are blocked unless the address or host is in the engine's SSRF allow-list"]
    assert site.seen == ["127.0.0.1/ws-page", "127.0.0.1/ws", "127.0.0.1/ws-page"]  # never 127.0.0.2


async def test_a_download_over_the_limit_is_refused_with_the_reason(site):
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http, \
            BrowserSession(http, max_download_bytes=50_000) as browser:
        assert "(HTTP 200)" in await browser.go_to_url(site.url("/"))
        clicked = await browser.click("Get the archive")
        await browser.settle_downloads()
        told = await browser.go_back()  # the next observation tells the model, if the click's did not
    assert browser.downloads == []
    reason = (f"{site.url('/big.bin')}: the response is over the 50000-byte limit "
              "(TRELLIS_BROWSER_MAX_DOWNLOAD_BYTES); it was cut off")
    assert browser.refused == [reason]
    assert (clicked + told).count(f"\nRefused: {reason}") == 1
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http, \
            BrowserSession(http, max_download_bytes=200_000) as browser:
        await browser.go_to_url(site.url("/"))
        # Chromium reports the download once the response starts, which may be after the click returned.
        async with browser._page.expect_download():
            await browser.click("Get the archive")
        await browser.settle_downloads()
    assert [(d.filename, len(d.content)) for d in browser.downloads] == [("big.bin", 100_000)]


class FailingClose:
    """Chromium's browser object whose close() fails (a crashed browser, say)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def close(self) -> None:
        raise RuntimeError("the browser is gone")


async def test_closing_goes_on_when_one_step_fails(caplog):
    async with OutboundHttp(EgressPolicy()) as http:
        browser = await BrowserSession(http, uploads={"notes.txt": b"hi"}).__aenter__()
        upload_dir = browser._upload_dir
        assert upload_dir is not None and os.listdir(upload_dir) == ["notes.txt"]
        browser._browser = FailingClose(browser._browser)
        with caplog.at_level(logging.WARNING, logger="services.orchestrator.components._browser"):
            await browser.aclose()
    assert browser._pw is None  # playwright stopped (and its browser with it)
    assert not os.path.exists(upload_dir)
    assert any("_close_browser failed" in r.getMessage() for r in caplog.records)


async def test_going_back_from_a_page_that_is_gone_is_told_not_raised(site):
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http, BrowserSession(http) as browser:
        assert "(HTTP 200)" in await browser.go_to_url(site.url("/"))
        await browser._page.close()  # as a page detached under the model (a refused download can do it)
        assert (await browser.go_back()).startswith("Could not go back: ")
