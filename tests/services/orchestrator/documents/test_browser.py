"""Browser: a scripted model drives Debian's chromium over a page served by a local aiohttp server."""

from __future__ import annotations

import pytest
from aiohttp import web

from services.orchestrator.components import get_class, is_available
from services.orchestrator.components.base import NodeContext
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from services.orchestrator.engine.events import ToolCallFinished, ToolCallStarted
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.store.attachments import AttachmentStore
from tests.support.llm_gateway import llm_gateway

PAGE = """<!DOCTYPE html><html><head><title>Harbour café</title></head><body>
<h1>Opening hours</h1><p>Open daily from 9 to 17, closed on Mondays.</p>
<a href="/menu.csv">Download the menu</a></body></html>"""
UPLOAD_PAGE = """<!DOCTYPE html><html><head><title>Upload</title></head><body>
<form method="post" action="/receive" enctype="multipart/form-data">
<input type="file" id="f" name="file"><button type="submit">Send</button></form></body></html>"""


RECEIVED: list[tuple[str, bytes]] = []


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
    async def upload(request):
        return web.Response(text=UPLOAD_PAGE, content_type="text/html")

    async def price_list(request):
        return web.Response(text="tea 2\n")

    async def receive(request):
        field = (await request.post())["file"]
        RECEIVED.append((field.filename, field.file.read()))
        return web.Response(text=f"<html><body>received {field.filename}</body></html>", content_type="text/html")

    app.router.add_get("/upload", upload)
    app.router.add_get("/data/price-list.txt", price_list)
    app.router.add_post("/receive", receive)
    RECEIVED.clear()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    yield f"http://127.0.0.1:{tcp._server.sockets[0].getsockname()[1]}/"
    await runner.cleanup()


async def _browse(redis_client, script: list, *, allow: list[str], **extra) -> tuple[NodeContext, AttachmentStore, object]:
    http = OutboundHttp(EgressPolicy.from_entries(allow))
    store = AttachmentStore(redis_client)
    params = {"llm_id": "pilot@Scripted", "prompts": "{sys.query}", "max_steps": 10, **extra}
    async with llm_gateway({"chat": {"pilot": script}}) as llm:
        ctx = NodeContext.for_test(params, component_id="Browser:b", component_name="Browser",
                                   outputs={"begin": {"doc": {"name": "notes.txt", "content": "hello upload"}}},
                                   globals_={"sys.query": "When is the café open? Also fetch its menu."},
                                   services=Services(llm=llm.client, http=http, attachments=store),
                                   request=RunRequest(run_id="run-test", tenant_id="tenant-a"))
        try:
            await get_class("Browser")("Browser:b", params).run(ctx)
        finally:
            await http.aclose()
    return ctx, store, llm.gateway


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
    assert [(i.component_id, i.field) for i in issues] == [("Browser:b", "params")]
    assert "the Browser component cannot run in this deployment" in issues[0].message
    assert "TRELLIS_BROWSER_EXECUTABLE" in issues[0].message and "chromium" in issues[0].message
    monkeypatch.delenv("TRELLIS_BROWSER_EXECUTABLE")
    assert get_class("Browser").check("Browser:b", {"llm_id": "x"}) == []
    bad = get_class("Browser").check("Browser:b", {"max_steps": 0, "prompts": ""})
    assert {i.field for i in bad} == {"params.max_steps", "params.prompts"}


async def test_upload_sources_reach_a_file_input(redis_client, site):
    script = [_call("go_to_url", url=site + "upload"), _call("upload_file", selector="#f", filename="notes.txt"),
              _call("click_element", text="Send"), _call("go_to_url", url=site + "upload"),
              _call("upload_file", selector="#f", filename="price-list.txt"), _call("click_element", text="Send"),
              _call("extract_content"), "Page: {last_tool}"]
    ctx, _, gateway = await _browse(redis_client, script, allow=["127.0.0.1"],
                                    upload_sources=["{begin@doc}", site + "data/price-list.txt"])
    # A Begin file input, and a URL fetched behind the guard, as the form sent them to the site.
    assert RECEIVED == [("notes.txt", b"hello upload"), ("price-list.txt", b"tea 2\n")]
    assert "received price-list.txt" in ctx.outputs["content"]
    first_user = gateway.scripted().calls[0][1].messages[1].content
    assert "- notes.txt" in first_user and "- price-list.txt" in first_user
    uploaded = [e.result for e in ctx.env.events if isinstance(e, ToolCallFinished) and e.tool_name == "upload_file"]
    assert uploaded == ["Put notes.txt into '#f'", "Put price-list.txt into '#f'"]


async def test_an_upload_url_behind_the_ssrf_guard_fails_naming_the_field(redis_client, site):
    from services.orchestrator.components._fields import FieldError

    with pytest.raises(FieldError) as err:
        await _browse(redis_client, ["unused"], allow=[], upload_sources=[site + "data/price-list.txt"])
    assert "Browser:b: params.upload_sources" in str(err.value) and "cannot fetch" in str(err.value)
