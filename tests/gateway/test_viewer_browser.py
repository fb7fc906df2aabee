"""The run viewer (/ui/) in a real headless browser (Debian's chromium, driven by playwright) against the
real stack in this process: gateway -> orchestrator (Redis) -> llm_gateway (scripted models).

Sign in, see the canvas as a graph, run an Agent that calls a tool and watch the components finish and the
answer stream, open the past run from the session list, see a failing component named; at laptop and phone
sizes. Screenshots land in the test's tmp_path (printed with -s), one per step.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from contextlib import asynccontextmanager

import pytest
from aiohttp.test_utils import TestClient, TestServer
from playwright.async_api import async_playwright, expect

from gateway.app import create_app
from gateway.config import GatewayConfig
from tests.support.canvas import cpn, registered
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.orchestrator import orchestrator
from tests.support.retrieval import embedding_gateway, running_stack
from tests.support.tool_doubles import WeatherTool

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # scripts/install_system_deps.sh installs it
KEY = "viewer-key"
SCRIPTS = {"chat": {
    # turn 0 calls the tool, turn 1 answers slowly enough to be seen streaming
    "weather": {"turns": [{"tool_calls": [{"name": "get_weather_0", "arguments": {"city": "Paris"}}]},
                          {"reply": "The forecast says: {last_tool}", "chunk_delay_s": 0.15}]},
    "broken": {"turns": [{"error": {"code": "INVALID_ARGUMENT", "message": "the model refused the prompt"}}]},
}}


ITERATION = {"components": {
    "begin": cpn("Begin", ["Iteration:Each"]),
    "Iteration:Each": cpn("Iteration", ["Message:Done"], {"items_ref": "sys.files", "outputs": {}}, up=["begin"]),
    "IterationItem:Start": {**cpn("IterationItem", ["StringTransform:Upper"]), "parent_id": "Iteration:Each"},
    "StringTransform:Upper": {**cpn("StringTransform", [], {"method": "merge", "script": "{IterationItem:Start@item}"},
                                    up=["IterationItem:Start"]), "parent_id": "Iteration:Each"},
    "Message:Done": cpn("Message", [], {"content": ["done"]}, up=["Iteration:Each"]),
}}


ASKER = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["UserFillUp:Ask"], "upstream": []},
    "UserFillUp:Ask": {"obj": {"component_name": "UserFillUp", "params": {
        "tips": "Where to, for {sys.query}?",
        "inputs": {"city": {"name": "City", "type": "options", "optional": False, "options": ["Oslo", "Lisbon"]},
                   "note": {"name": "Note", "type": "paragraph", "optional": True, "options": []}}}},
        "downstream": ["Message:Go"], "upstream": ["begin"]},
    "Message:Go": {"obj": {"component_name": "Message", "params": {
        "content": ["Going to {UserFillUp:Ask@city} {UserFillUp:Ask@note}"]}}, "downstream": [], "upstream": ["UserFillUp:Ask"]},
}}


def _canvas(model: str) -> dict:
    return {"components": {
        "begin": cpn("Begin", ["Agent:Forecaster"]),
        "Agent:Forecaster": cpn("Agent", ["Message:Reply"], {
            "llm_id": f"{model}@Scripted", "sys_prompt": "You report the weather.", "max_rounds": 2,
            "tools": [{"component_name": "TestWeatherTool", "name": "Weather", "params": {}}]}, up=["begin"]),
        "Message:Reply": cpn("Message", [], {"content": ["{Agent:Forecaster@content}"]}, up=["Agent:Forecaster"]),
    }}


def _handbook(dataset_id: str) -> dict:
    """Begin -> Retrieval -> Message: the answer is the chunks found, with them as references."""
    return {"components": {
        "begin": cpn("Begin", ["Retrieval:Find"]),
        "Retrieval:Find": cpn("Retrieval", ["Message:Reply"], {"kb_ids": [dataset_id], "top_n": 2,
                                                              "similarity_threshold": 0.0}, up=["begin"]),
        "Message:Reply": cpn("Message", [], {"content": ["{Retrieval:Find@formalized_content}"]}, up=["Retrieval:Find"]),
    }}


@asynccontextmanager
async def _stack(redis_url: str, retrieval_addr: str, tenant: str):
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_url, llm_gateway_addr=llm.addr,
                                                         retrieval_addr=retrieval_addr) as orch:
        cfg = GatewayConfig(host="127.0.0.1", port=0, health_timeout_s=1.0, api_keys={KEY: tenant},
                            upstreams={"orchestrator": orch.addr, "llm_gateway": llm.addr,
                                       "retrieval": retrieval_addr, "sandbox": f"127.0.0.1:{free_port()}"})
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def site(redis_server, tmp_path_factory):
    with registered(WeatherTool):
        async with embedding_gateway() as embed_addr, \
                running_stack("sqlite", tmp_path_factory.mktemp("kb"), embed_addr) as kb, \
                _stack(redis_server.url, f"127.0.0.1:{kb.port}", kb.tenant) as client:
            dataset = await kb.dataset("handbook", size=64)
            await kb.ingest(dataset.id, "handbook.md", "# Backups\nSnapshots are kept for fourteen days.\n")
            auth = {"Authorization": f"Bearer {KEY}"}
            for title, dsl, release in (("Forecaster", _canvas("weather"), True), ("Broken", _canvas("broken"), False),
                                        ("Looper", ITERATION, False), ("Handbook", _handbook(dataset.id), False),
                                        ("Asker", ASKER, False)):
                body = await (await client.post("/api/v1/agents", headers=auth,
                                                json={"title": title, "dsl": dsl, "release": release})).json()
                assert body["code"] == 0, body
            yield str(client.server.make_url("/ui/"))


@pytest.fixture
async def browser():
    async with async_playwright() as pw:
        # Debian's build, never playwright's own download; root in a container has no user namespaces.
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        await b.close()


async def _sign_in(page, url: str) -> None:
    await page.goto(url)
    await page.fill("#api-key", "not-a-key")
    await page.click("#sign-in-form button")
    await expect(page.locator("#sign-in-error")).to_have_text("This API key was refused by the gateway.")
    await page.fill("#api-key", KEY)
    await page.click("#sign-in-form button")
    await expect(page.locator("#viewer")).to_be_visible()


async def _ask(page, text: str) -> None:
    await page.fill("#query", text)
    await page.click("#send")


async def test_sign_in_run_watch_and_replay_on_a_laptop(site, browser, tmp_path):
    page = await browser.new_page(viewport={"width": 1366, "height": 860})
    page.on("console", lambda m: print("console:", m.text))
    page.on("pageerror", lambda e: print("pageerror:", e))
    await _sign_in(page, site)
    await expect(page.locator("#agents button")).to_have_count(5)
    # A container's children are drawn inside its box.
    await page.click("#agents button:text-is('Looper')")
    await expect(page.locator("#agent-title")).to_have_text("Looper")
    await page.wait_for_load_state("networkidle")  # the graph is drawn once the agent's DSL arrived
    container = await page.locator('.node[data-id="Iteration:Each"]').bounding_box()
    for child in ("IterationItem:Start", "StringTransform:Upper"):
        box = await page.locator(f'.node[data-id="{child}"]').bounding_box()
        assert container["x"] < box["x"] and box["x"] + box["width"] < container["x"] + container["width"], child
        assert container["y"] < box["y"] and box["y"] + box["height"] < container["y"] + container["height"], child
    await page.screenshot(path=tmp_path / "0-laptop-iteration.png")
    await page.click("#agents button:text-is('Forecaster')")
    await expect(page.locator("#versions option")).to_have_text(["Latest published", "Draft", "v1"])
    graph = page.locator("#graph")
    for node in ("begin", "Agent:Forecaster", "Message:Reply"):
        await expect(graph.locator(f'.node[data-id="{node}"]')).to_be_visible()
    await expect(graph.locator('.node[data-id="Agent:Forecaster"] .chip')).to_have_text("Weather")
    await expect(graph.locator("svg path[data-from]")).to_have_count(2)
    await page.screenshot(path=tmp_path / "1-laptop-canvas.png")

    await _ask(page, "Weather in Paris?")
    answer = page.locator(".msg.assistant").last
    # Mid-stream: part of the answer is there while the run still streams.
    await expect(page.locator(".msg.assistant.streaming .msg-body")).to_contain_text("forecast")
    await page.screenshot(path=tmp_path / "2-laptop-streaming.png")
    await expect(page.locator("#run-status")).to_contain_text("done", timeout=30_000)
    await expect(answer).to_contain_text("The forecast says: Sunny, 21 degrees in Paris")
    for node in ("begin", "Agent:Forecaster", "Message:Reply"):
        await expect(graph.locator(f'.node[data-id="{node}"]')).to_have_class("node done")
        await expect(graph.locator(f'.node[data-id="{node}"] .node-time')).to_have_text(re.compile(r"^(\d+ ms|\d+\.\d+ s)$"))
    tool = page.locator("#trace li.t-tool")
    await expect(tool).to_contain_text("tool get_weather_0 returned")
    await tool.locator("summary").first.click()
    await expect(tool.locator("pre").first).to_contain_text('"city": "Paris"')
    await expect(page.locator("#trace")).to_contain_text("Agent started")
    await page.screenshot(path=tmp_path / "3-laptop-finished.png")

    # The session now lists this run; its stored trace replays onto the canvas.
    await page.click("#new-chat")
    await expect(page.locator("#messages .msg")).to_have_count(0)
    await page.locator("#sessions button").first.click()
    await expect(page.locator("#messages")).to_contain_text("Weather in Paris?")
    await page.click(".trace-link")
    # The run's stored event stream replays: every component with its time, the tool call, the run's end...
    await expect(page.locator("#trace li.t-run").first).to_have_text("run started")
    await expect(page.locator("#trace li.t-run").last).to_have_text(re.compile(r"^done in .* tokens$"))
    await expect(page.locator("#trace li.t-tool")).to_contain_text("tool get_weather_0 returned")
    for node in ("begin", "Agent:Forecaster", "Message:Reply"):
        await expect(graph.locator(f'.node[data-id="{node}"]')).to_have_class("node done")
        await expect(graph.locator(f'.node[data-id="{node}"] .node-time')).to_have_text(re.compile(r"^(\d+ ms|\d+\.\d+ s)$"))
    # ...then the Agent's reasoning from the run log, and the status.
    await expect(page.locator("#trace li.t-thought")).to_contain_text("round 1: called get_weather_0")
    await expect(page.locator("#run-status")).to_have_text(re.compile("succeeded|done"))
    await page.screenshot(path=tmp_path / "4-laptop-replay.png")

    # A failing component is named, on the canvas and in the answer. Its canvas arrives slowly: a question
    # asked at once waits for it, or the run's marks would land on the graph the canvas then draws over.
    async def slow(route):
        await asyncio.sleep(1.0)
        await route.continue_()
    await page.route("**/versions", slow)
    await page.click("#agents button:text-is('Broken')")
    await _ask(page, "anything")
    await page.unroute("**/versions", slow)
    await expect(page.locator("#run-status")).to_have_text("failed", timeout=30_000)
    await expect(graph.locator('.node[data-id="Agent:Forecaster"]')).to_have_class("node failed")
    await expect(page.locator(".msg.assistant .error")).to_contain_text("model refused the prompt")
    await expect(page.locator("#trace li.t-fail").last).to_contain_text("Agent:Forecaster")
    await page.screenshot(path=tmp_path / "5-laptop-failed.png")

    # References: a Retrieval's chunks come with the answer and in the trace.
    await page.click("#agents button:text-is('Handbook')")
    await _ask(page, "How long are snapshots kept?")
    await expect(page.locator("#run-status")).to_contain_text("done", timeout=30_000)
    await expect(page.locator(".msg.assistant").last).to_contain_text("fourteen days")
    refs = page.locator(".msg.assistant .refs").last
    await expect(refs.locator("summary")).to_have_text("1 reference")
    await refs.locator("summary").click()
    await expect(refs).to_contain_text("handbook.md")
    await expect(page.locator("#trace li.t-ref")).to_contain_text("1 reference")
    await page.screenshot(path=tmp_path / "6-laptop-references.png")
    print(f"screenshots: {tmp_path}")


async def test_a_run_that_waits_for_the_user_shows_its_form_and_goes_on_with_the_answer(site, browser, tmp_path):
    page = await browser.new_page(viewport={"width": 1366, "height": 860})
    await _sign_in(page, site)
    await page.click("#agents button:text-is('Asker')")
    await _ask(page, "a trip")
    form = page.locator(".msg.assistant form.fill-up").last
    await expect(form.locator(".tips")).to_have_text("Where to, for a trip?")
    await expect(page.locator("#run-status")).to_have_text("waiting for your answer", timeout=30_000)
    await form.locator("select[name=city]").select_option("Lisbon")
    await form.locator("textarea[name=note]").fill("by train")
    await form.locator("button").click()
    await expect(page.locator(".msg.assistant").last).to_contain_text("Going to Lisbon by train", timeout=30_000)
    await expect(page.locator("#run-status")).to_contain_text("done")
    await page.screenshot(path=tmp_path / "8-fill-up.png")
    print(f"screenshots: {tmp_path}")


async def test_the_viewer_works_on_a_phone(site, browser, tmp_path):
    context = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                                        device_scale_factor=2)
    page = await context.new_page()
    await _sign_in(page, site)
    await page.click("#agents button:text-is('Forecaster')")
    await _ask(page, "Weather in Oslo?")
    await expect(page.locator("#run-status")).to_contain_text("done", timeout=30_000)
    await expect(page.locator(".msg.assistant").last).to_contain_text("Sunny, 21 degrees in Paris")
    # One column: nothing wider than the screen except inside the scrollable canvas.
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways on a phone: {width}px"
    await page.screenshot(path=tmp_path / "7-phone.png", full_page=True)

    # Stop: the stream closes (which cancels the run) and the page says so.
    await page.click("#new-chat")
    await _ask(page, "Weather again?")
    await expect(page.locator(".msg.assistant.streaming .msg-body")).to_contain_text("forecast")
    await page.click("#stop")
    await expect(page.locator("#run-status")).to_have_text("stopped")
    await expect(page.locator("#trace li.t-run").last).to_have_text("stopped")
    await expect(page.locator("#send")).to_be_visible()
    await expect(page.locator("#graph .node.running")).to_have_count(0)
    await context.close()
    print(f"screenshots: {tmp_path}")
