"""/docs in a real headless browser (Debian's chromium, driven by playwright): Swagger UI loads from the
gateway's own files, reads /openapi.json (OpenAPI 3.1) and lists the operations, with no network."""

from __future__ import annotations

import shutil

from playwright.async_api import async_playwright, expect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # scripts/install_system_deps.sh installs it


async def test_docs_page_lists_the_operations(stack):
    document = await (await stack.client.get("/openapi.json")).json()
    operations = sum(len(ops) for ops in document["paths"].values())
    base = str(stack.client.server.make_url("")).rstrip("/")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            outside: list[str] = []
            page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(base) else None)
            await page.goto(f"{base}/docs")
            await expect(page.locator(".opblock").first).to_be_visible(timeout=30_000)
            await expect(page.locator(".opblock")).to_have_count(operations)
            await expect(page.locator(".opblock-summary-path", has_text="/api/v1/datasets").first).to_be_visible()
            assert "Trellis gateway" in await page.locator(".info .title").inner_text()
            assert outside == [], outside
        finally:
            await browser.close()
