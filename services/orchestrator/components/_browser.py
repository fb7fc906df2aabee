"""A headless Chromium driven over its DevTools protocol (playwright's Python package, never its own browser
download), with the actions the Browser component's model may take.

The browser is Debian's `chromium` (scripts/install_system_deps.sh), or TRELLIS_BROWSER_EXECUTABLE.
Every request the page makes, navigations and sub-resources alike, passes the run's SSRF guard first
(`OutboundHttp.check_url`, TRELLIS_SSRF_ALLOWLIST): a private or loopback address is refused unless allowed.
Files the page downloads are collected and handed back when the session ends; the files the task may upload
are written to a private temporary directory for the session's life.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

EXECUTABLE_ENV = "TRELLIS_BROWSER_EXECUTABLE"
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TEXT_LIMIT = 12_000  # characters of page text one observation carries
NAV_TIMEOUT_MS = 20_000
ACTION_TIMEOUT_MS = 5_000


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

    http: Any  # OutboundHttp (the SSRF guard); None only in tests without one: then nothing is checked
    headless: bool = True
    chromium_sandbox: bool = False
    uploads: dict[str, bytes] = field(default_factory=dict)  # filename -> bytes the page may be given
    downloads: list[Downloaded] = field(default_factory=list)
    _pw: Any = None
    _browser: Any = None
    _page: Any = None
    _pending: list[asyncio.Task] = field(default_factory=list)
    _upload_dir: tempfile.TemporaryDirectory | None = None

    async def __aenter__(self) -> "BrowserSession":
        from playwright.async_api import async_playwright

        executable = find_executable()
        if executable is None:
            raise RuntimeError(unavailable_reason() or "no browser")
        self._pw = await async_playwright().start()
        try:
            if self.uploads:
                self._upload_dir = tempfile.TemporaryDirectory(prefix="trellis-browser-")
                for name, content in self.uploads.items():
                    with open(os.path.join(self._upload_dir.name, os.path.basename(name) or "upload.bin"), "wb") as f:
                        f.write(content)
            self._browser = await self._pw.chromium.launch(
                executable_path=executable, headless=self.headless, chromium_sandbox=self.chromium_sandbox)
            context = await self._browser.new_context(accept_downloads=True)
            await context.route("**/*", self._guard)
            self._page = await context.new_page()
            self._page.set_default_timeout(ACTION_TIMEOUT_MS)
            self._page.on("download", lambda d: self._pending.append(asyncio.ensure_future(self._keep(d))))
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
            self._pending.clear()
        if self._browser is not None:
            await self._browser.close()
            self._browser = None
        if self._pw is not None:
            await self._pw.stop()
            self._pw = None
        if self._upload_dir is not None:
            self._upload_dir.cleanup()
            self._upload_dir = None

    # -- the guard and downloads
    async def _guard(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(("data:", "about:", "blob:")):
            await route.continue_()
            return
        if not url.startswith(("http://", "https://")):
            await route.abort("blockedbyclient")
            return
        if self.http is not None:
            try:
                await self.http.check_url(url)
            except Exception:  # EgressBlocked, or a name that does not resolve: the page gets a network error
                await route.abort("blockedbyclient")
                return
        await route.continue_()

    async def _keep(self, download: Any) -> None:
        path = await download.path()
        if path:
            with open(path, "rb") as f:
                self.downloads.append(Downloaded(download.suggested_filename or "download.bin", f.read()))

    async def settle_downloads(self) -> None:
        """Wait for the downloads started so far."""
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending, return_exceptions=True)

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
                return f"{url} started a download: {', '.join(d.filename for d in self.downloads)}"
            return f"Could not open {url}: {_first_line(exc)}"
        status = response.status if response is not None else 0
        return f"Opened {self._page.url} (HTTP {status}), title: {await self._page.title()!r}"

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
            return f"Could not click {text!r}: {_first_line(exc)}"
        await asyncio.sleep(0)  # let a download event that the click started be queued
        return f"Clicked {text!r}; now at {self._page.url}"

    async def input_text(self, selector: str, text: str, submit: bool) -> str:
        try:
            await self._page.fill(selector, text, timeout=ACTION_TIMEOUT_MS)
            if submit:
                await self._page.press(selector, "Enter")
                await self._page.wait_for_load_state("domcontentloaded")
        except Exception as exc:
            return f"Could not type into {selector!r}: {_first_line(exc)}"
        return f"Typed into {selector!r}" + (f"; submitted, now at {self._page.url}" if submit else "")

    async def upload_file(self, selector: str, filename: str) -> str:
        name = os.path.basename(filename)
        if self._upload_dir is None or name not in {os.path.basename(n) for n in self.uploads}:
            return f"No file {filename!r} to upload; the task's files: {', '.join(self.uploads) or 'none'}"
        try:
            await self._page.set_input_files(selector, os.path.join(self._upload_dir.name, name),
                                             timeout=ACTION_TIMEOUT_MS)
        except Exception as exc:
            return f"Could not upload {name} into {selector!r}: {_first_line(exc)}"
        return f"Put {name} into {selector!r}"

    async def go_back(self) -> str:
        await self._page.go_back()
        return f"Back at {self._page.url}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
