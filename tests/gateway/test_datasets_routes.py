"""RAGFlow's dataset/document/retrieval endpoints (gateway/routes/datasets.py) over HTTP, against a real
retrieval service and llm_gateway. The app here holds only these routes, as the gateway will register them."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import UPSTREAMS
from gateway.auth import KeyRing
from gateway.endpoint import KEYS
from gateway.routes import datasets
from gateway.upstreams import Upstreams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services" / "retrieval"))
from retrieval_helpers import EMBED, llm_gateway, make_pdf, running_stack  # noqa: E402

A, B = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}


@pytest.fixture
async def client(tmp_path):
    async with llm_gateway() as llm, running_stack("sqlite", tmp_path, llm) as svc:
        app = web.Application()
        app[KEYS] = KeyRing({"key-a": "tenant-a", "key-b": "tenant-b"})

        async def upstreams(app: web.Application):
            app[UPSTREAMS] = Upstreams({"retrieval": f"127.0.0.1:{svc.port}"})
            yield
            await app[UPSTREAMS].close()

        app.cleanup_ctx.append(upstreams)
        datasets.add_routes(app)
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


async def _json(resp: aiohttp.ClientResponse) -> dict:
    assert resp.status == 200
    return await resp.json()


async def test_dataset_lifecycle_upload_and_retrieval(client):
    created = await _json(await client.post("/api/v1/datasets", headers=A, json={
        "name": "manuals", "embedding_model": EMBED, "parser_config": {"chunk_token_num": 64}}))
    assert created["code"] == 0 and created["data"]["name"] == "manuals"
    ds = created["data"]["id"]
    assert created["data"]["parser_config"]["chunk_token_num"] == 64
    dup = await _json(await client.post("/api/v1/datasets", headers=A, json={"name": "manuals"}))
    assert dup["code"] != 0 and "already exists" in dup["message"]

    form = aiohttp.FormData()
    form.add_field("file", b"# Boiler\n\nBleed the radiator valve every autumn.", filename="boiler.md", content_type="text/markdown")
    form.add_field("file", make_pdf(["Warranty lasts five years."]), filename="warranty.pdf")
    form.add_field("file", b"%PDF-1.4 broken", filename="broken.pdf", content_type="application/pdf")
    up = await _json(await client.post(f"/api/v1/datasets/{ds}/documents", headers=A, data=form))
    assert [(d["name"], d["run"]) for d in up["data"]] == [("boiler.md", "DONE"), ("warranty.pdf", "DONE"), ("broken.pdf", "FAIL")]
    assert "PDF" in up["data"][2]["progress_msg"] and up["data"][0]["chunk_count"] == 1

    listed = await _json(await client.get(f"/api/v1/datasets/{ds}/documents", headers=A))
    assert listed["data"]["total"] == 3 and {d["name"] for d in listed["data"]["docs"]} == {"boiler.md", "warranty.pdf", "broken.pdf"}
    one = await _json(await client.get(f"/api/v1/datasets/{ds}/documents?name=boiler.md", headers=A))
    assert [d["name"] for d in one["data"]["docs"]] == ["boiler.md"]
    parse = await _json(await client.post(f"/api/v1/datasets/{ds}/chunks", headers=A, json={"document_ids": [up["data"][0]["id"]]}))
    assert parse["code"] == 0

    found = await _json(await client.post("/api/v1/retrieval", headers=A, json={
        "question": "radiator valve", "dataset_ids": [ds], "similarity_threshold": 0.1}))
    chunks = found["data"]["chunks"]
    assert chunks[0]["document_keyword"] == "boiler.md" and "radiator" in chunks[0]["content"]
    assert found["data"]["doc_aggs"][0]["doc_name"] == "boiler.md" and found["data"]["total"] >= 1

    dsets = await _json(await client.get("/api/v1/datasets", headers=A))
    assert dsets["total"] == 1 and dsets["data"][0]["document_count"] == 3
    gone = await _json(await client.delete(f"/api/v1/datasets/{ds}/documents", headers=A, json={"ids": [up["data"][0]["id"]]}))
    assert gone["code"] == 0
    after = await _json(await client.post("/api/v1/retrieval", headers=A, json={"question": "radiator valve", "dataset_ids": [ds],
                                                                                "vector_similarity_weight": 0.0}))
    assert after["data"]["chunks"] == []
    assert (await _json(await client.delete("/api/v1/datasets", headers=A, json={"ids": [ds]})))["code"] == 0
    assert (await _json(await client.get("/api/v1/datasets", headers=A)))["data"] == []


async def test_tenants_auth_and_bad_input(client):
    ds = (await _json(await client.post("/api/v1/datasets", headers=A, json={"name": "private", "embedding_model": EMBED})))["data"]["id"]
    assert (await _json(await client.get("/api/v1/datasets", headers=B)))["data"] == []
    other = await _json(await client.get(f"/api/v1/datasets/{ds}/documents", headers=B))
    assert other["code"] == 102 and "not found" in other["message"]
    stolen = await _json(await client.post("/api/v1/retrieval", headers=B, json={"question": "x", "dataset_ids": [ds]}))
    assert stolen["code"] == 102
    no_key = await _json(await client.get("/api/v1/datasets"))
    assert no_key["code"] != 0 and "Authorization" in no_key["message"]
    no_name = await _json(await client.post("/api/v1/datasets", headers=A, json={}))
    assert no_name["code"] == 101 and "name" in no_name["message"]
    no_file = await _json(await client.post(f"/api/v1/datasets/{ds}/documents", headers=A, json={}))
    assert no_file["code"] == 101 and "multipart" in no_file["message"]
    no_ids = await _json(await client.delete("/api/v1/datasets", headers=A, json={}))
    assert no_ids["code"] == 101 and "ids" in no_ids["message"]
