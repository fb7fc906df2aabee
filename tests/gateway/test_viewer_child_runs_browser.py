"""The run viewer (/ui/) and agents calling agents, in a real headless browser (Debian's chromium, driven by
playwright) against the real stack in this process: gateway -> orchestrator (Redis).

A caller agent whose AgentCall node runs a helper agent as a child run: the caller's past trace links to the
child's ("open child run"), the child's links back ("open caller run"), and so does the child opened from the
helper's own session list. Screenshots land in the test's tmp_path (printed with -s).
"""

from __future__ import annotations

import re
import shutil
from contextlib import asynccontextmanager

import pytest
from aiohttp.test_utils import TestClient, TestServer
from playwright.async_api import async_playwright, expect

from gateway.app import create_app
from gateway.config import GatewayConfig
from tests.support.canvas import cpn
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # scripts/install_system_deps.sh installs it
KEY = "viewer-key"
HELPER = {"components": {
    "begin": cpn("Begin", ["Message:Out"]),
    "Message:Out": cpn("Message", [], {"content": ["Helper heard: {sys.query}"]}, up=["begin"]),
}}


def _caller(helper_id: str) -> dict:
    return {"components": {
        "begin": cpn("Begin", ["AgentCall:Ask"]),
        "AgentCall:Ask": cpn("AgentCall", ["Message:Reply"], {"agent_id": helper_id, "query": "{sys.query}!"},
                             up=["begin"]),
        "Message:Reply": cpn("Message", [], {"content": ["Caller got: {AgentCall:Ask@content}"]},
                             up=["AgentCall:Ask"]),
    }}


@asynccontextmanager
async def _stack(redis_url: str):
    async with orchestrator(redis_url) as orch:  # no model: neither canvas asks one
        nowhere = f"127.0.0.1:{free_port()}"
        cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0, api_keys={KEY: "tenant-viewer-children"},
                            upstreams={"orchestrator": orch.addr, "llm_gateway": nowhere, "retrieval": nowhere,
                                       "sandbox": nowhere})
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def site(redis_server):
    async with _stack(redis_server.url) as client:
        auth = {"Authorization": f"Bearer {KEY}"}

        async def create(title: str, dsl: dict) -> str:
            body = await (await client.post("/api/v1/agents", headers=auth,
                                            json={"title": title, "dsl": dsl, "release": True})).json()
            assert body["code"] == 0, body
            return body["data"]["id"]

        await create("Caller", _caller(await create("Helper", HELPER)))
        yield str(client.server.make_url("/ui/"))


@pytest.fixture
async def browser():
    async with async_playwright() as pw:
        # Debian's build, never playwright's own download; root in a container has no user namespaces.
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        await b.close()


async def _signed_in(browser, url: str):
    page = await (await browser.new_context(viewport={"width": 1366, "height": 860})).new_page()
    page.on("pageerror", lambda e: print("pageerror:", e))
    await page.goto(url)
    await page.fill("#api-key", KEY)
    await page.click("#sign-in-form button")
    await expect(page.locator("#viewer")).to_be_visible()
    return page


async def test_a_callers_trace_opens_its_child_run_and_the_child_links_back(site, browser, tmp_path):
    page = await _signed_in(browser, site)
    await expect(page.locator("#sessions li")).to_have_count(1)  # the first agent's, opened at sign-in
    await page.click("#agents button:text-is('Caller')")
    await expect(page.locator("#agent-title")).to_have_text("Caller")
    await page.fill("#query", "ping")
    await page.click("#send")
    await expect(page.locator("#run-status")).to_contain_text("done", timeout=30_000)
    await expect(page.locator(".msg.assistant").last).to_contain_text("Caller got: Helper heard: ping!")

    # The caller's past run: its AgentCall node links to the child run it started.
    await page.locator("#sessions button").first.click()
    await page.locator(".trace-link").last.click()
    trace, graph = page.locator("#trace"), page.locator("#graph")
    await expect(trace.locator("li.t-run").first).to_have_text("run started")
    child_link = trace.locator("li", has=page.locator("code.t-node", has_text="AgentCall:Ask")).locator(
        "button.t-link")
    await expect(child_link).to_have_text("open child run")
    await page.screenshot(path=tmp_path / "1-caller-trace.png")

    # Following it opens the helper, the child's session and the child's own trace, which links back.
    await child_link.click()
    await expect(page.locator("#agent-title")).to_have_text("Helper")
    await expect(page.locator("#trace-title")).to_have_text(re.compile(r"^run [0-9a-f]{8}$"))
    await expect(page.locator("#messages .msg.user")).to_have_text("ping!")
    await expect(trace.locator("li.t-run").first).to_have_text("run started")
    await expect(trace).to_contain_text("Message started")
    await expect(graph.locator('.node[data-id="Message:Out"]')).to_have_class("node done")
    await expect(page.locator("#run-status")).to_have_text(re.compile("succeeded|done"))
    back = trace.locator("li.t-run", has=page.locator("button.t-link"))
    await expect(back).to_contain_text("called by run")
    await page.screenshot(path=tmp_path / "2-child-trace.png")
    await back.locator("button.t-link").click()
    await expect(page.locator("#agent-title")).to_have_text("Caller")
    await expect(child_link).to_have_text("open child run")

    # The child opened from the helper's own session list, on a page that opened no run yet: the caller is
    # found among this key's agents.
    page = await _signed_in(browser, site)
    await expect(page.locator("#sessions button")).to_have_count(1)  # the first agent's, opened at sign-in
    await page.click("#agents button:text-is('Helper')")
    await page.locator("#sessions button", has_text="ping!").click()
    await page.locator(".trace-link").last.click()  # the answer's: the child's session starts with the prologue
    trace = page.locator("#trace")
    await expect(trace.locator("li.t-run").first).to_have_text("run started")
    await trace.locator("li.t-run button.t-link").click()
    await expect(page.locator("#agent-title")).to_have_text("Caller")
    await expect(page.locator("#messages .msg.user")).to_have_text("ping")
    await expect(trace.locator("button.t-link")).to_have_text("open child run")
    await page.screenshot(path=tmp_path / "3-back-to-the-caller.png")
    print(f"screenshots: {tmp_path}")
