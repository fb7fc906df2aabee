"""The run viewer's static files at /ui/, and the envelope `error` naming the component the viewer marks."""

from __future__ import annotations

import json

from gateway.routes.ui import UI_DIR


async def test_ui_serves_the_page_and_its_modules_without_a_key(stack):
    page = await stack.client.get("/ui", allow_redirects=True)
    assert page.status == 200 and str(page.url).endswith("/ui/")
    html = await page.text()
    assert '<script type="module" src="/ui/app.js">' in html
    for name in ("app.js", "api.js", "dom.js", "graph.js", "trace.js"):
        resp = await stack.client.get(f"/ui/{name}")
        assert resp.status == 200
        assert resp.content_type in ("text/javascript", "application/javascript"), resp.content_type
        assert await resp.text() == (UI_DIR / name).read_text()
    assert (await stack.client.get("/ui/style.css")).content_type == "text/css"
    assert (await stack.client.get("/ui/missing.js")).status == 404
    assert (await stack.client.get("/ui/../app.py")).status in (403, 404)


async def test_envelope_error_names_the_failing_component(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.post(f"/api/v1/agents/{agent.id}/stream", json={"query": "explode"}, headers=stack.auth())
    frames = [json.loads(line[len("data: "):]) for line in (await resp.read()).decode().splitlines() if line.startswith("data: ")]
    [error] = [f for f in frames if f["type"] == "error"]
    assert error["data"]["component_id"] == "Agent:A" and error["node_name"] == "Agent:A"
