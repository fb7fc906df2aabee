"""Run attachments over HTTP, through the real gateway and orchestrator: a DocGenerator's file is listed in the
run's message_end `downloads`, its owner downloads it, and another tenant gets 404."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from aiohttp.test_utils import TestClient, TestServer
from docx import Document

from gateway.app import create_app

KEY_A, KEY_B = "att-key-a", "att-key-b"
DSL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["DocGenerator:menu"], "upstream": []},
    "DocGenerator:menu": {"obj": {"component_name": "DocGenerator", "params": {
        "output_format": "docx", "filename": "Menü {sys.query}", "content": "# Menu\n\nToday: **{sys.query}**"}},
        "downstream": ["Message:out"], "upstream": ["begin"]},
    "Message:out": {"obj": {"component_name": "Message", "params": {
        "content": ["Here is your file.{DocGenerator:menu@download}"]}}, "downstream": [], "upstream": ["DocGenerator:menu"]},
}, "history": [], "path": [], "retrieval": []}


@pytest.fixture
async def gateway(orchestrator_addr, stack):
    run = uuid.uuid4().hex[:8]
    cfg = stack.config(api_keys={KEY_A: f"att-a-{run}", KEY_B: f"att-b-{run}"},
                       upstreams={**stack.config().upstreams, "orchestrator": orchestrator_addr})
    client = TestClient(TestServer(create_app(cfg)))
    await client.start_server()
    yield client
    await client.close()


def _h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _run(gateway) -> list[dict]:
    created = await (await gateway.post("/api/v1/agents", json={"title": "Menu", "dsl": DSL}, headers=_h(KEY_A))).json()
    assert created["code"] == 0, created
    resp = await gateway.post("/api/v1/agents/chat/completions", headers=_h(KEY_A),
                              json={"agent_id": created["data"]["id"], "query": "soup", "stream": True})
    frames = [f for f in (await resp.read()).decode().split("\n\n") if f and f != "data:[DONE]"]
    return [json.loads(f.split("\n", 1)[0][5:]) for f in frames]


async def test_the_owner_downloads_the_file_another_tenant_gets_404(gateway):
    events = await _run(gateway)
    assert not any(e["event"] == "error" for e in events), events
    answer = "".join(e["data"].get("content", "") for e in events if e["event"] == "message")
    assert answer == "Here is your file."  # the download info is listed, not written into the answer
    [end] = [e for e in events if e["event"] == "message_end"]
    [info] = end["data"]["downloads"]
    assert (info["filename"], info["mime_type"]) == (
        "Menü soup.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document")
    assert "include_download_info_in_content" not in info

    resp = await gateway.get(info["download_url"], headers=_h(KEY_A))
    assert resp.status == 200 and resp.headers["Content-Type"] == info["mime_type"]
    assert resp.headers["Content-Disposition"].startswith("attachment;")
    assert "filename*=UTF-8''Men%C3%BC%20soup.docx" in resp.headers["Content-Disposition"]
    body = await resp.read()
    assert len(body) == info["size"]
    texts = [p.text for p in Document(io.BytesIO(body)).paragraphs]
    assert "Menu" in texts and "Today: soup" in texts

    preview = await gateway.get(info["preview_url"], headers=_h(KEY_A))
    assert preview.status == 200 and preview.headers["Content-Disposition"].startswith("inline;")

    for path in (info["download_url"], info["preview_url"]):
        other = await gateway.get(path, headers=_h(KEY_B))
        assert other.status == 404
        assert await other.json() == {"code": 102, "message": "document not found", "data": False}
    missing = await gateway.get(f"/api/v1/agents/attachments/{uuid.uuid4().hex}/download", headers=_h(KEY_A))
    assert missing.status == 404
    anonymous = await gateway.get(info["download_url"])
    assert (await anonymous.json())["code"] != 0  # no key: RAGFlow's auth error, never the file
