"""The run viewer's admission panel and a refused run, in a real headless browser (Debian's chromium, driven
by playwright) against the gateway and the scripted orchestrator, which refuses the signed-in tenant as the
orchestrator's admission does (tests/support/fake_orchestrator.py): the chat says why and when to try again,
and the panel counts the refusal under its limit; with the orchestrator's figures (GetTenantAdmission) the
panel shows them and the tenant's limits. Screenshots land in the test's tmp_path."""

from __future__ import annotations

import shutil

import pytest
from playwright.async_api import async_playwright, expect
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # scripts/install_system_deps.sh installs it

DSL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Message:Reply"], "upstream": []},
    "Message:Reply": {"obj": {"component_name": "Message", "params": {"content": ["hi"]}}, "downstream": [],
                      "upstream": ["begin"]},
}}


@pytest.fixture
async def browser():
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        await b.close()


async def test_a_refused_run_says_when_to_retry_and_the_panel_counts_it(stack, browser, tmp_path):
    stack.fake.add_agent(stack.tenant_a, title="Greeter", dsl=DSL)
    stack.fake.refused[stack.tenant_a] = 1.5
    page = await browser.new_page(viewport={"width": 1366, "height": 860})
    page.on("pageerror", lambda e: print("pageerror:", e))
    await page.goto(f"{stack.url}/ui/")
    await page.fill("#api-key", stack.key_a)
    await page.click("#sign-in-form button")
    panel = page.locator("#admission")
    await expect(panel).to_have_attribute("data-tenant", stack.tenant_a)
    refused = panel.locator("dt:text-is('Refused') + dd")
    before = int(await refused.inner_text())
    await expect(panel.locator("dt:text-is('Admitted') + dd")).to_have_text("n/a")

    await page.click("#agents button:text-is('Greeter')")
    await page.fill("#query", "hello")
    await page.click("#send")
    error = page.locator("#messages .error")
    await expect(error).to_contain_text("concurrent_runs")
    await expect(error).to_contain_text("(try again in 2 s)")
    await expect(page.locator("#run-status")).to_have_text("refused")
    await expect(refused).to_have_text(str(before + 1))
    await expect(panel.locator("dt:text-is('concurrent_runs') + dd")).to_be_visible()
    await page.screenshot(path=tmp_path / "refused.png")


async def test_the_panel_shows_the_orchestrators_figures_and_the_tenants_limits(stack, browser, tmp_path):
    stack.fake.admission[stack.tenant_a] = canvas_pb.GetTenantAdmissionResponse(
        admitted=7, refused=3, refused_by_limit={"concurrent_runs": 2, "capacity": 1}, running=2, waiting=1,
        llm_tokens_last_minute=1500, llm_tokens=42000, replicas=2,
        limits=canvas_pb.TenantLimits(concurrent_runs=5, tokens_per_minute=100000, weight=2))
    page = await browser.new_page(viewport={"width": 1366, "height": 860})
    page.on("pageerror", lambda e: print("pageerror:", e))
    await page.goto(f"{stack.url}/ui/")
    await page.fill("#api-key", stack.key_a)
    await page.click("#sign-in-form button")
    panel = page.locator("#admission")
    await expect(panel).to_have_attribute("data-source", "orchestrator")
    for label, value in (("Admitted", "7"), ("Refused", "3"), ("concurrent_runs", "2"), ("capacity", "1"),
                         ("Running", "2"), ("Waiting", "1"), ("LLM tokens, last minute", "1500"),
                         ("LLM tokens", "42000"), ("concurrent runs", "5"), ("LLM tokens per minute", "100000"),
                         ("runs per second", "none"), ("weight", "2")):
        await expect(panel.locator(f"dt:text-is('{label}') + dd")).to_have_text(value)
    await page.screenshot(path=tmp_path / "admission.png")
