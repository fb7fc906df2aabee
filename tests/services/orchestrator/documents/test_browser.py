"""Browser: a scripted model drives Debian's chromium over a page served by a local aiohttp server."""

from __future__ import annotations

import pytest
from aiohttp import web

from services.common.testing import start_server
from services.llm_gateway.client import LlmClient
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.server import LlmServicer
from services.orchestrator.attachments import AttachmentStore
from services.orchestrator.components import get_class, is_available
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine_settings import Services
from services.orchestrator.events import ToolCallFinished, ToolCallStarted
from services.orchestrator.http_client import EgressPolicy, OutboundHttp
from services.orchestrator.state import RunRequest

PAGE = """<!DOCTYPE html><html><head><title>Harbour café</title></head><body>
<h1>Opening hours</h1><p>Open daily from 9 to 17, closed on Mondays.</p>
<a href="/menu.csv">Download the menu</a></body></html>"""


@pytest.fixture
async def site():
    async def index(request):
        return web.Response(text=PAGE, content_type="text/html")

    async def menu(request):
        return web.Response(body=b"dish,price\nsoup,4\n", headers={
            "Content-Type": "text/csv", "Content-Disposition": 'attachment; filename="menu.csv"'})

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/menu.csv", menu)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    yield f"http://127.0.0.1:{tcp._server.sockets[0].getsockname()[1]}/"
    await runner.cleanup()


async def _browse(redis_client, script: list, *, allow: list[str]) -> tuple[NodeContext, AttachmentStore, object]:
    gateway = LlmGateway.create(LlmGatewayConfig.for_tests(), scripts={"chat": {"pilot": script}})
    server, port = await start_server([LlmServicer(gateway).binding()], service="llm_gateway")
    llm = LlmClient.connect(f"127.0.0.1:{port}")
    http = OutboundHttp(EgressPolicy.from_entries(allow))
    store = AttachmentStore(redis_client)
    params = {"llm_id": "pilot@Scripted", "prompts": "{sys.query}", "max_steps": 6}
    ctx = NodeContext.for_test(params, component_id="Browser:b", component_name="Browser",
                               globals_={"sys.query": "When is the café open? Also fetch its menu."},
                               services=Services(llm=llm, http=http, attachments=store),
                               request=RunRequest(run_id="run-test", tenant_id="tenant-a"))
    try:
        await get_class("Browser")("Browser:b", params).run(ctx)
    finally:
        await llm.close()
        await http.aclose()
        await server.stop(None)
        await gateway.aclose()
    return ctx, store, gateway


def _call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_registered():
    assert is_available("Browser")


async def test_the_model_opens_the_page_reads_it_and_downloads_a_file(redis_client, site):
    script = [_call("go_to_url", url=site), _call("click_element", text="Download the menu"),
              _call("extract_content"), "From the page: {last_tool}"]
    ctx, store, _ = await _browse(redis_client, script, allow=["127.0.0.1"])
    content = ctx.outputs["content"]
    assert content.startswith("From the page: URL: " + site)
    assert "Title: Harbour café" in content and "Open daily from 9 to 17, closed on Mondays." in content
    [menu] = ctx.outputs["downloaded_files"]
    assert (menu["filename"], menu["mime_type"]) == ("menu.csv", "text/csv")
    assert (await store.get("tenant-a", menu["doc_id"])).content == b"dish,price\nsoup,4\n"
    started = [e.tool_name for e in ctx.env.events if isinstance(e, ToolCallStarted)]
    assert started == ["go_to_url", "click_element", "extract_content"]
    opened = next(e for e in ctx.env.events if isinstance(e, ToolCallFinished) and e.tool_name == "go_to_url")
    assert "(HTTP 200)" in opened.result and "Harbour café" in opened.result


async def test_done_ends_the_task_with_its_text(redis_client, site):
    ctx, _, gateway = await _browse(redis_client, [_call("go_to_url", url=site), _call("done", text="Open 9-17."),
                                                   "never reached"], allow=["127.0.0.1"])
    assert ctx.outputs == {"content": "Open 9-17.", "downloaded_files": []}


async def test_a_loopback_page_is_refused_unless_allowed(redis_client, site):
    ctx, _, _ = await _browse(redis_client, [_call("go_to_url", url=site), "Result: {last_tool}"], allow=[])
    assert ctx.outputs["content"].startswith(f"Result: Refused to open {site}")


def test_validation_says_when_the_deployment_has_no_browser(monkeypatch, tmp_path):
    monkeypatch.setenv("TRELLIS_BROWSER_EXECUTABLE", str(tmp_path / "no-chromium"))
    issues = get_class("Browser").check("Browser:b", {"llm_id": "x", "prompts": "{sys.query}"})
    assert [(i.component_id, i.field) for i in issues] == [("Browser:b", "component_name")]
    assert "the Browser component cannot run in this deployment" in issues[0].message
    assert "TRELLIS_BROWSER_EXECUTABLE" in issues[0].message and "chromium" in issues[0].message
    monkeypatch.delenv("TRELLIS_BROWSER_EXECUTABLE")
    assert get_class("Browser").check("Browser:b", {"llm_id": "x"}) == []
    bad = get_class("Browser").check("Browser:b", {"max_steps": 0, "prompts": ""})
    assert {i.field for i in bad} == {"params.max_steps", "params.prompts"}
