"""A headless Chromium driven over its DevTools protocol (playwright's Python package, never its own browser
download), with the actions the Browser component's model may take.

The browser is Debian's `chromium` (scripts/install_system_deps.sh), or TRELLIS_BROWSER_EXECUTABLE.
Chromium reaches the network only through the session's proxy (_browser_proxy.py): every connection, for
navigations, sub-resources, redirects and WebSockets alike, goes to an address the run's SSRF guard
(`OutboundHttp.resolve`, TRELLIS_SSRF_ALLOWLIST) checked when it was made, so a private or loopback address is
refused unless allowed, a DNS answer that changes after an earlier check included. Requests for other
schemes than http(s) (file:...) are refused before they leave the page. A response, a download included,
is at most `max_download_bytes` (TRELLIS_BROWSER_MAX_DOWNLOAD_BYTES). What was refused, and why, is added to
the next observation the model gets. Files the page downloads are collected and handed back when the session
ends; the files the task may upload are written to a private temporary directory for the session's life.
File work runs in worker threads.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from services.orchestrator.components._browser_proxy import GuardedProxy

EXECUTABLE_ENV = "TRELLIS_BROWSER_EXECUTABLE"
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TEXT_LIMIT = 12_000  # characters of page text one observation carries
NAV_TIMEOUT_MS = 20_000
ACTION_TIMEOUT_MS = 5_000
DEFAULT_MAX_DOWNLOAD_BYTES = 32 * 1024 * 1024
LIMIT_SETTING = "TRELLIS_BROWSER_MAX_DOWNLOAD_BYTES"

log = logging.getLogger(__name__)


def find_executable() -> str | None:
    """The Chromium to drive: TRELLIS_BROWSER_EXECUTABLE when set (and executable), else one on PATH."""
    configured = os.environ.get(EXECUTABLE_ENV, "").strip()
    if configured:
        return configured if os.path.isfile(configured) and os.access(configured, os.X_OK) else None
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def unavailable_reason() -> str | None:
    """Why no browser can run here, or None."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pyproject.toml)"
    if find_executable() is None:
        where = os.environ.get(EXECUTABLE_ENV) or "PATH (" + ", ".join(_CANDIDATES) + ")"
        return (f"no Chromium browser found at {where}: install Debian's chromium "
                f"(scripts/install_system_deps.sh) or set {EXECUTABLE_ENV}")
    return None


@dataclass
class Downloaded:
    filename: str
    content: bytes


@dataclass
class BrowserSession:
    """One run's browser: `async with BrowserSession(http) as b: await b.go_to_url(...)`."""

    http: Any  # OutboundHttp (the SSRF guard); None only in tests without one: then Chromium connects unchecked
    headless: bool = True
    chromium_sandbox: bool = False
    uploads: dict[str, bytes] = field(default_factory=dict)  # filename -> bytes the page may be given
    max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES  # the largest response (and download) taken
    downloads: list[Downloaded] = field(default_factory=list)
    _pw: Any = None
    _browser: Any = None
    _proxy: GuardedProxy | None = None
    _page: Any = None
    _pending: list[asyncio.Task] = field(default_factory=list)
    _upload_dir: str | None = None
    _refusals: list[tuple[tuple[str, int] | None, str]] = field(default_factory=list)  # (host, port) or None
    _asked: set[tuple[str, int]] = field(default_factory=set)  # (host, port) the page sent requests to
    _reported: int = 0  # how many of `refused` an observation has told the model about

    async def __aenter__(self) -> "BrowserSession":
        from playwright.async_api import async_playwright

        executable = find_executable()
        if executable is None:
            raise RuntimeError(unavailable_reason() or "no browser")
        try:
            if self.uploads:
                self._upload_dir = await asyncio.to_thread(_write_files, self.uploads)
            proxy = None
            if self.http is not None:
                self._proxy = GuardedProxy(self.http, self.max_download_bytes, LIMIT_SETTING)
                self._proxy.refused = self._refusals
                # "<-loopback>": loopback too goes through the proxy (Chromium would connect to it directly)
                proxy = {"server": await self._proxy.start(), "bypass": "<-loopback>"}
            self._pw = await async_playwright().start()
            self._browser = await self._pw.chromium.launch(
                executable_path=executable, headless=self.headless, chromium_sandbox=self.chromium_sandbox,
                proxy=proxy)
            context = await self._browser.new_context(accept_downloads=True)
            await context.route("**/*", self._guard)
            self._page = await context.new_page()
            self._page.set_default_timeout(ACTION_TIMEOUT_MS)
            self._page.on("download", lambda d: self._pending.append(asyncio.ensure_future(self._keep(d))))
            self._page.on("request", lambda r: self._asking(r.url))  # redirect hops too, which `route` does not see
            self._page.on("websocket", lambda ws: self._asking(ws.url))
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close everything: a step that fails is logged, and the steps after it still run."""
        for step in (self.settle_downloads, self._close_browser, self._stop_playwright, self._close_proxy,
                     self._remove_uploads):
            try:
                await step()
            except Exception:  # noqa: BLE001 - closing goes on; the browser's answer is already in
                log.warning("browser session: %s failed", step.__name__, exc_info=True)

    async def _close_browser(self) -> None:
        browser, self._browser, self._page = self._browser, None, None
        if browser is not None:
            await browser.close()

    async def _stop_playwright(self) -> None:
        pw, self._pw = self._pw, None
        if pw is not None:
            await pw.stop()

    async def _close_proxy(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            await proxy.aclose()

    async def _remove_uploads(self) -> None:
        path, self._upload_dir = self._upload_dir, None
        if path is not None:
            await asyncio.to_thread(shutil.rmtree, path)

    # -- the guard and downloads
    async def _guard(self, route: Any) -> None:
        """Only http(s) leaves the page (through the proxy); data:, about: and blob: stay inside it."""
        url = route.request.url
        if url.startswith(("http://", "https://", "data:", "about:", "blob:")):
            await route.continue_()
        else:
            await route.abort("blockedbyclient")

    async def _keep(self, download: Any) -> None:
        name = download.suggested_filename or "download.bin"
        path = await download.path()
        if not path:
            return
        size = await asyncio.to_thread(os.path.getsize, path)
        if size > self.max_download_bytes:
            self._refusals.append((None, f"download {name}: {size} bytes, over the {self.max_download_bytes}-byte "
                                         f"limit ({LIMIT_SETTING})"))
            return
        self.downloads.append(Downloaded(name, await asyncio.to_thread(_read_file, path)))

    async def settle_downloads(self) -> None:
        """Wait for the downloads started so far."""
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending, return_exceptions=True)

    def _asking(self, address: str) -> None:
        url = URL(address)
        if url.scheme in ("http", "https", "ws", "wss") and url.host:
            self._asked.add((url.host.lower(), url.port or 0))

    @property
    def refused(self) -> list[str]:
        """Why the page's requests and downloads were refused, in order, each once (Chromium retries a request
        whose connection was cut); not Chromium's own requests."""
        return list(dict.fromkeys(why for key, why in self._refusals if key is None or key in self._asked))

    def _news(self) -> str:
        """What was refused since the model was last told, as lines to add to an observation."""
        refused = self.refused
        news, self._reported = refused[self._reported:], len(refused)
        return "".join(f"\nRefused: {line}" for line in news)

    # -- actions (each returns the observation the model sees)
    async def go_to_url(self, url: str) -> str:
        if self.http is not None:
            try:
                await self.http.check_url(url)
            except Exception as exc:
                return f"Refused to open {url}: {exc}"
        try:
            response = await self._page.goto(url, wait_until="domcontentloaded", timeout=NAV_TIMEOUT_MS)
        except Exception as exc:
            if "Download is starting" in str(exc):
                await self.settle_downloads()
                return f"{url} started a download: {', '.join(d.filename for d in self.downloads)}{self._news()}"
            return f"Could not open {url}: {_first_line(exc)}{self._news()}"
        status = response.status if response is not None else 0
        return f"Opened {self._page.url} (HTTP {status}), title: {await self._page.title()!r}{self._news()}"

    async def extract_content(self) -> str:
        text = await self._page.evaluate("() => document.body ? document.body.innerText : ''")
        links = await self._page.evaluate(
            "() => Array.from(document.querySelectorAll('a[href]')).slice(0, 40)"
            ".map(a => (a.innerText || '').trim() + ' -> ' + a.href)")
        body = text.strip()
        if len(body) > TEXT_LIMIT:
            body = body[:TEXT_LIMIT] + "\n[... truncated]"
        out = f"URL: {self._page.url}\nTitle: {await self._page.title()}\n\n{body}"
        if links:
            out += "\n\nLinks:\n" + "\n".join(links)
        return out

    async def click(self, text: str) -> str:
        try:
            target = self._page.get_by_text(text, exact=False).first
            await target.click(timeout=ACTION_TIMEOUT_MS)
            await self._page.wait_for_load_state("domcontentloaded")
        except Exception as exc:
            return f"Could not click {text!r}: {_first_line(exc)}{self._news()}"
        await asyncio.sleep(0)  # let a download event that the click started be queued
        return f"Clicked {text!r}; now at {self._page.url}{self._news()}"

    async def input_text(self, selector: str, text: str, submit: bool) -> str:
        try:
            await self._page.fill(selector, text, timeout=ACTION_TIMEOUT_MS)
            if submit:
                await self._page.press(selector, "Enter")
                await self._page.wait_for_load_state("domcontentloaded")
        except Exception as exc:
            return f"Could not type into {selector!r}: {_first_line(exc)}{self._news()}"
        return f"Typed into {selector!r}" + (f"; submitted, now at {self._page.url}" if submit else "") + self._news()

    async def upload_file(self, selector: str, filename: str) -> str:
        name = os.path.basename(filename)
        if self._upload_dir is None or name not in {os.path.basename(n) for n in self.uploads}:
            return f"No file {filename!r} to upload; the task's files: {', '.join(self.uploads) or 'none'}"
        try:
            await self._page.set_input_files(selector, os.path.join(self._upload_dir, name),
                                             timeout=ACTION_TIMEOUT_MS)
        except Exception as exc:
            return f"Could not upload {name} into {selector!r}: {_first_line(exc)}"
        return f"Put {name} into {selector!r}"

    async def go_back(self) -> str:
        try:
            await self._page.go_back()
        except Exception as exc:  # the page went away meanwhile (a refused download can detach it): say so
            return f"Could not go back: {_first_line(exc)}{self._news()}"
        return f"Back at {self._page.url}{self._news()}"


def _write_files(files: dict[str, bytes]) -> str:
    """A new private directory holding `files`; its path."""
    path = tempfile.mkdtemp(prefix="trellis-browser-")
    try:
        for name, content in files.items():
            with open(os.path.join(path, os.path.basename(name) or "upload.bin"), "wb") as f:
                f.write(content)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
