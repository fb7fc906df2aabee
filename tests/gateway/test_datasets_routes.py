"""RAGFlow's dataset, document, chunk and retrieval routes (gateway/routes/datasets.py) over HTTP against the
real retrieval service: the validation rules, defaults, codes and messages of RAGFlow's restful_apis
(dataset_api.py, document_api.py, chunk_api.py) and its api/utils/validation_utils.py."""

from __future__ import annotations

import asyncio

import uuid

import aiohttp
import pytest

EMBED = "bow@Scripted"


def _form(*files: tuple[str, bytes]) -> aiohttp.FormData:
    form = aiohttp.FormData()
    for name, content in files:
        form.add_field("file", content, filename=name, content_type="application/octet-stream")
    return form


async def _parsed(live, dataset_id: str, docs: list[dict]) -> list[dict]:
    """Parse uploaded documents (RAGFlow's upload leaves them UNSTART) and wait until each has ended."""
    ids = [d["id"] for d in docs]
    res = await live.call("POST", f"/api/v1/datasets/{dataset_id}/documents/parse", json={"document_ids": ids})
    assert res["code"] == 0, res
    while True:  # the parse runs in the retrieval service's background; each poll is one request
        listed = (await live.call("GET", f"/api/v1/datasets/{dataset_id}/documents", params={"page_size": 100}))["data"]
        runs = {d["id"]: d for d in listed["docs"] if d["id"] in ids}
        if all(d["run"] in ("DONE", "FAIL", "CANCEL") for d in runs.values()):
            return [runs[i] for i in ids]
        await asyncio.sleep(0.05)


async def _dataset(live, name: str = "kb", **extra) -> dict:
    res = await live.call("POST", "/api/v1/datasets", json={"name": name, "embedding_model": EMBED, **extra})
    assert res["code"] == 0, res
    return res["data"]


# ---- auth ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer invalid_key_123"}])
async def test_missing_or_wrong_key_is_http_401_code_401(live, headers):
    for method, path in [("GET", "/api/v1/datasets"), ("DELETE", "/api/v1/datasets"), ("POST", "/api/v1/retrieval"),
                         ("POST", "/api/v1/tasks/missing_task/cancel"), ("PATCH", "/api/v1/tasks/missing_task")]:
        resp = await live.client.request(method, path, headers=headers, json={"action": "stop"})
        assert resp.status == 401, (method, path)
        assert await resp.json() == {"code": 401, "message": "<Unauthorized '401: Unauthorized'>", "data": None}


# ---- create ---------------------------------------------------------------------------------------------

async def test_create_returns_ragflows_defaults(live):
    ds = await _dataset(live, "defaults")
    assert ds["chunk_method"] == "naive" and ds["permission"] == "me" and ds["avatar"] is None
    config = ds["parser_config"]
    assert config["chunk_token_num"] == 512 and config["delimiter"] == "\n" and config["layout_recognize"] == "DeepDOC"
    assert config["raptor"]["use_raptor"] is True and config["graphrag"]["method"] == "light"
    assert config["children_delimiter"] == "" and config["table_context_size"] == 0
    listed = await live.call("GET", "/api/v1/datasets", params={"id": ds["id"]})
    assert listed["data"][0]["parser_config"] == config  # stored, not recomputed differently
    one = await live.call("GET", f"/api/v1/datasets/{ds['id']}")
    assert one["data"]["id"] == ds["id"] and one["data"]["parser_config"] == config and one["data"]["size"] == 0
    other = await live.call("GET", f"/api/v1/datasets/{ds['id']}", key=live.key_b)
    assert other["code"] == 102 and other["message"].endswith(f"lacks permission for dataset '{ds['id']}'")


async def test_create_keeps_chunk_method_permission_avatar_and_merges_parser_config(live):
    avatar = "data:image/png;base64,iVBORw0KGgo="
    ds = await _dataset(live, "qa-set", chunk_method="qa", permission="team", avatar=avatar,
                        parser_config={"chunk_token_num": 128, "raptor": {"use_raptor": True}})
    assert (ds["chunk_method"], ds["permission"], ds["avatar"]) == ("qa", "team", avatar)
    # A parser_config given is stored whole with its defaults (RAGFlow's create): GraphRAG off unless given.
    assert ds["parser_config"]["chunk_token_num"] == 128 and ds["parser_config"]["raptor"]["use_raptor"] is True
    assert ds["parser_config"]["raptor"]["max_token"] == 512 and ds["parser_config"]["graphrag"]["use_graphrag"] is False
    again = await live.call("GET", "/api/v1/datasets", params={"name": "qa-set"})
    assert again["data"][0]["chunk_method"] == "qa" and again["data"][0]["permission"] == "team"


async def test_duplicate_name_gets_a_counter(live):
    assert (await _dataset(live, "dup"))["name"] == "dup"
    assert (await _dataset(live, "dup"))["name"] == "dup(1)"
    assert (await _dataset(live, "dup"))["name"] == "dup(2)"


@pytest.mark.parametrize("payload, expected", [
    ({"name": ""}, "String should have at least 1 character"),
    ({"name": " "}, "String should have at least 1 character"),
    ({"name": "a" * 129}, "String should have at most 128 characters"),
    ({"name": 0}, "Input should be a valid string"),
    ({"name": None}, "Input should be a valid string"),
    ({"name": "x", "avatar": "a" * 65536}, "String should have at most 65535 characters"),
    ({"name": "x", "avatar": "iVBORw0KGgo"}, "missing MIME prefix. Expected format: data:<mime>;base64,<data>"),
    ({"name": "x", "avatar": "image/png,AAA"}, "invalid MIME prefix format. Must start with 'data:'"),
    ({"name": "x", "avatar": "data:video/mp4;base64,AAA"}, "Unsupported MIME type. Allowed: ['image/jpeg', 'image/png']"),
    ({"name": "x", "description": "a" * 65536}, "String should have at most 65535 characters"),
    ({"name": "x", "embedding_model": "BAAI/bge"}, "embedding model identifier must follow <model_name>@<provider> format"),
    ({"name": "x", "embedding_model": "@Factory"}, "both model_name and provider must be non-empty strings"),
    ({"name": "x", "permission": "everyone"}, "Input should be 'me' or 'team'"),
    ({"name": "x", "permission": None}, "Input should be 'me' or 'team'"),
    ({"name": "x", "chunk_method": "unknown"}, "Input should be 'naive', 'book', 'email', 'laws', 'manual', 'one', "
                                                "'paper', 'picture', 'presentation', 'qa', 'table', 'tag' or 'resume'"),
    ({"name": "x", "chunk_method": None}, "Input should be 'naive'"),
    ({"name": "x", "parser_config": {"chunk_token_num": 0}}, "Input should be greater than or equal to 1"),
    ({"name": "x", "parser_config": {"chunk_token_num": 2049}}, "Input should be less than or equal to 2048"),
    ({"name": "x", "parser_config": {"auto_keywords": 33}}, "Input should be less than or equal to 32"),
    ({"name": "x", "parser_config": {"auto_questions": -1}}, "Input should be greater than or equal to 0"),
    ({"name": "x", "parser_config": {"topn_tags": 11}}, "Input should be less than or equal to 10"),
    ({"name": "x", "parser_config": {"delimiter": ""}}, "String should have at least 1 character"),
    ({"name": "x", "parser_config": {"raptor": {"max_cluster": 0}}}, "Input should be greater than or equal to 1"),
    ({"name": "x", "parser_config": {"graphrag": {"method": "other"}}}, "Input should be 'light', 'general' or 'ner'"),
    ({"name": "x", "parser_config": {"unknown": 1}}, "Extra inputs are not permitted"),
    ({"name": "x", "tenant_id": "e57c1966f99211efb41e9e45646e0111"}, "Extra inputs are not permitted"),
    ({"name": "x", "pagerank": 50}, "Extra inputs are not permitted"),
])
async def test_create_refuses_what_ragflow_refuses(live, payload, expected):
    res = await live.call("POST", "/api/v1/datasets", json=payload)
    assert res["code"] == 101, res
    assert expected in res["message"], res
    assert res["message"].startswith("Field: <")


async def test_create_body_must_be_a_json_object(live):
    bad_type = await live.call("POST", "/api/v1/datasets", data=b"name=x", headers={"Content-Type": "text/xml"})
    assert bad_type == {"code": 101, "message": "Unsupported content type: Expected application/json, got text/xml",
                        "data": False}
    malformed = await live.call("POST", "/api/v1/datasets", data=b"{", headers={"Content-Type": "application/json"})
    assert malformed["message"] == "Malformed JSON syntax: Missing commas/brackets or invalid encoding"
    a_string = await live.call("POST", "/api/v1/datasets", data=b'"a"', headers={"Content-Type": "application/json"})
    assert a_string["message"] == "Invalid request payload: expected object, got str"


# ---- list and delete -----------------------------------------------------------------------------------------

async def test_list_pagination_and_filters(live):
    for i in range(3):
        await _dataset(live, f"page-{i}")
    page = await live.call("GET", "/api/v1/datasets", params={"page": 2, "page_size": 2})
    assert page["code"] == 0 and page["total_datasets"] == 3 and len(page["data"]) == 1
    bad_page = await live.call("GET", "/api/v1/datasets", params={"page": "x"})  # RAGFlow's ListDatasetReq is strict
    assert bad_page["code"] == 101 and "Input should be a valid integer" in bad_page["message"]
    zero = await live.call("GET", "/api/v1/datasets", params={"page": 0})
    assert zero["code"] == 101 and "Input should be greater than or equal to 1" in zero["message"]
    too_big = await live.call("GET", "/api/v1/datasets", params={"page_size": 101})
    assert too_big["code"] == 101 and "page_size must be less than or equal to 100" in too_big["message"]
    unknown = uuid.uuid4().hex
    missing = await live.call("GET", "/api/v1/datasets", params={"id": unknown})
    assert missing["code"] == 102 and f"lacks permission for dataset '{unknown}'" in missing["message"]
    bad_id = await live.call("GET", "/api/v1/datasets", params={"id": "not-a-uuid"})
    assert bad_id["code"] == 101 and bad_id["message"] == "Field: <id> - Message: <Invalid UUID format> - Value: <not-a-uuid>"
    bad_order = await live.call("GET", "/api/v1/datasets", params={"orderby": "name"})
    assert bad_order["code"] == 101 and "Input should be 'create_time' or 'update_time'" in bad_order["message"]


async def test_delete_ids_null_deletes_nothing_and_delete_all_deletes_all(live):
    a, b = await _dataset(live, "a"), await _dataset(live, "b")
    for payload in ({"ids": None}, {"ids": []}, {}):
        res = await live.call("DELETE", "/api/v1/datasets", json=payload)
        assert res == {"code": 0, "message": "success", "data": {"success_count": 0}}, payload
    assert len((await live.call("GET", "/api/v1/datasets"))["data"]) == 2
    dup = await live.call("DELETE", "/api/v1/datasets", json={"ids": [a["id"], a["id"]]})
    assert dup["code"] == 101 and "Duplicate ids:" in dup["message"]
    bad = await live.call("DELETE", "/api/v1/datasets", json={"ids": ["not_uuid"]})
    assert bad["code"] == 101 and "Invalid UUID format" in bad["message"]
    other = await live.call("DELETE", "/api/v1/datasets", json={"ids": [a["id"]]}, key=live.key_b)
    assert other["code"] == 102 and "lacks permission for datasets" in other["message"]
    extra = await live.call("DELETE", "/api/v1/datasets", json={"unknown_field": 1})
    assert extra["code"] == 101 and "Extra inputs are not permitted" in extra["message"]
    one = await live.call("DELETE", "/api/v1/datasets", json={"ids": [b["id"]]})
    assert one["data"] == {"success_count": 1}
    again = await live.call("DELETE", "/api/v1/datasets", json={"ids": [b["id"]]})
    assert again["code"] == 102 and "lacks permission for datasets" in again["message"]
    assert (await live.call("DELETE", "/api/v1/datasets", json={"ids": None, "delete_all": True}))["data"] == {"success_count": 1}
    assert (await live.call("GET", "/api/v1/datasets"))["data"] == []


# ---- documents -------------------------------------------------------------------------------------------

async def test_upload_renames_duplicates_refuses_unsupported_types_and_lists(live):
    ds = (await _dataset(live, "docs"))["id"]
    first = await live.call("POST", f"/api/v1/datasets/{ds}/documents", data=_form(("a.txt", b"Bleed the radiator valve.")))
    assert first["code"] == 0 and first["data"][0]["name"] == "a.txt" and first["data"][0]["run"] == "UNSTART"
    assert first["data"][0]["process_begin_at"] is None and first["data"][0]["chunk_count"] == 0
    [doc] = await _parsed(live, ds, first["data"])
    assert doc["run"] == "DONE" and "Task done" in doc["progress_msg"] and doc["chunk_count"] == 1
    assert doc["process_begin_at"] and doc["chunk_method"] == "naive" and doc["dataset_id"] == ds
    second = await live.call("POST", f"/api/v1/datasets/{ds}/documents",
                             data=_form(("a.txt", b"Second copy."), ("a.txt", b"Third copy.")))
    assert [d["name"] for d in second["data"]] == ["a(1).txt", "a(2).txt"]
    exe = await live.call("POST", f"/api/v1/datasets/{ds}/documents", data=_form(("tool.exe", b"MZ")))
    assert exe["code"] == 500 and exe["message"] == "tool.exe: This type of file has not been supported yet!"
    mixed = await live.call("POST", f"/api/v1/datasets/{ds}/documents", data=_form(("b.md", b"# B"), ("c.exe", b"MZ")))
    assert mixed["code"] == 500 and [d["name"] for d in mixed["data"]] == ["b.md"]
    no_file = await live.call("POST", f"/api/v1/datasets/{ds}/documents", json={})
    assert no_file["code"] == 101 and no_file["message"] == "No file part!"

    listed = await live.call("GET", f"/api/v1/datasets/{ds}/documents", params={"page_size": 2})
    assert listed["data"]["total"] == 4 and len(listed["data"]["docs"]) == 2
    by_name = await live.call("GET", f"/api/v1/datasets/{ds}/documents", params={"name": "a(1).txt"})
    assert [d["name"] for d in by_name["data"]["docs"]] == ["a(1).txt"]
    unknown = await live.call("GET", f"/api/v1/datasets/{ds}/documents", params={"id": "nope"})
    assert unknown["code"] == 102 and unknown["message"] == "you don't own the document nope"
    other = await live.call("GET", f"/api/v1/datasets/{ds}/documents", key=live.key_b)
    assert other["code"] == 102 and other["message"] == f"You don't own the dataset {ds}. "


async def test_parse_and_delete_documents(live):
    ds = (await _dataset(live, "parse"))["id"]
    doc = (await live.call("POST", f"/api/v1/datasets/{ds}/documents", data=_form(("a.txt", b"hello"))))["data"][0]
    assert (await live.call("POST", f"/api/v1/datasets/{ds}/chunks", json={"document_ids": [doc["id"]]}))["code"] == 0
    required = await live.call("POST", f"/api/v1/datasets/{ds}/chunks", json={})
    assert (required["code"], required["message"]) == (102, "`document_ids` is required")
    missing = await live.call("POST", f"/api/v1/datasets/{ds}/chunks", json={"document_ids": ["x"]})
    assert missing["code"] == 102 and missing["message"] == "Documents not found: ['x']"
    dup = await live.call("POST", f"/api/v1/datasets/{ds}/chunks", json={"document_ids": [doc["id"], doc["id"]]})
    assert dup["code"] == 0 and dup["data"]["errors"] == [f"Duplicate document ids: {doc['id']}"]

    neither = await live.call("DELETE", f"/api/v1/datasets/{ds}/documents", json={"ids": None})
    assert neither["code"] == 102 and "should either provide doc ids or set delete_all(true)" in neither["message"]
    both = await live.call("DELETE", f"/api/v1/datasets/{ds}/documents", json={"ids": [doc["id"]], "delete_all": True})
    assert both["code"] == 102 and "should not provide both doc ids and delete_all(true)" in both["message"]
    wrong = await live.call("DELETE", f"/api/v1/datasets/{ds}/documents", json={"ids": ["x"]})
    assert wrong["code"] == 102 and "Document not found: x" in wrong["message"]
    dup_ids = await live.call("DELETE", f"/api/v1/datasets/{ds}/documents", json={"ids": ["x", "x"]})
    assert dup_ids["code"] == 101 and "Duplicate ids: 'x'" in dup_ids["message"]
    gone = await live.call("DELETE", f"/api/v1/datasets/{ds}/documents", json={"ids": [doc["id"]]})
    assert gone == {"code": 0, "message": "success", "data": {"deleted": 1}}


# ---- chunks ------------------------------------------------------------------------------------------------

async def test_chunks_list_add_update_delete_and_search(live):
    ds = (await _dataset(live, "chunks"))["id"]
    doc = (await live.call("POST", f"/api/v1/datasets/{ds}/documents",
                           data=_form(("boiler.md", b"# Boiler\n\nBleed the radiator valve every autumn."))))["data"][0]
    await _parsed(live, ds, [doc])
    base = f"/api/v1/datasets/{ds}/documents/{doc['id']}/chunks"
    listed = await live.call("GET", base)
    assert listed["code"] == 0 and listed["data"]["total"] == 1 and listed["data"]["doc"]["id"] == doc["id"]
    assert "radiator" in listed["data"]["chunks"][0]["content"]

    added = await live.call("POST", base, json={"content": "The warranty lasts five years.", "important_keywords": ["warranty"],
                                                 "questions": [" How long? ", ""]})
    assert added["code"] == 0 and added["data"]["chunk"]["important_keywords"] == ["warranty"]
    assert added["data"]["chunk"]["questions"] == ["How long?"]  # stripped, empty ones dropped (RAGFlow)
    chunk_id = added["data"]["chunk"]["id"]
    found = await live.call("POST", "/api/v1/retrieval", json={"question": "warranty years", "dataset_ids": [ds],
                                                                "similarity_threshold": 0.0})
    assert found["data"]["chunks"][0]["id"] == chunk_id

    assert (await live.call("PATCH", f"{base}/{chunk_id}", json={"content": "The warranty lasts ten years."}))["code"] == 0
    one = await live.call("GET", base, params={"id": chunk_id})
    assert one["data"]["chunks"][0]["content"] == "The warranty lasts ten years."
    assert one["data"]["chunks"][0]["important_keywords"] == ["warranty"]  # kept across a content change
    patched = await live.call("PATCH", f"{base}/{chunk_id}", json={"available": 0, "important_keywords": ["ten"]})
    assert patched["code"] == 0
    stored = (await live.call("GET", base, params={"id": chunk_id}))["data"]["chunks"][0]
    assert (stored["available"], stored["important_keywords"], stored["questions"]) == (False, ["ten"], ["How long?"])
    bad_list = await live.call("PATCH", f"{base}/{chunk_id}", json={"questions": "q"})
    assert (bad_list["code"], bad_list["message"]) == (102, "`questions` should be a list")
    assert (await live.call("GET", base, params={"keywords": "radiator"}))["data"]["total"] == 1

    empty = await live.call("POST", base, json={"content": " "})
    assert (empty["code"], empty["message"]) == (102, "`content` is required")
    not_list = await live.call("POST", base, json={"content": "x", "questions": "q"})
    assert (not_list["code"], not_list["message"]) == (102, "`questions` is required to be a list")
    no_chunk = await live.call("PATCH", f"{base}/nope", json={"content": "x"})
    assert (no_chunk["code"], no_chunk["message"]) == (102, "Can't find this chunk nope")
    no_doc = await live.call("GET", f"/api/v1/datasets/{ds}/documents/nope/chunks")
    assert (no_doc["code"], no_doc["message"]) == (102, "you don't own the document nope")

    deleted = await live.call("DELETE", base, json={"chunk_ids": [chunk_id]})
    assert deleted["code"] == 0 and deleted["message"] == "deleted 1 chunks"
    wrong = await live.call("DELETE", base, json={"chunk_ids": ["nope"]})
    assert wrong["code"] == 102 and wrong["message"] == "rm_chunk deleted chunks 0, expect 1"
    assert (await live.call("DELETE", base, json={"delete_all": True}))["message"] == "deleted 1 chunks"
    assert (await live.call("GET", base))["data"]["total"] == 0


# ---- retrieval -----------------------------------------------------------------------------------------------

async def test_retrieval_validation_and_tenants(live):
    ds = (await _dataset(live, "search"))["id"]
    uploaded = await live.call("POST", f"/api/v1/datasets/{ds}/documents", data=_form(("a.txt", b"Bleed the radiator valve.")))
    await _parsed(live, ds, uploaded["data"])
    cases = [({"question": "x"}, "`dataset_ids` is required."),
             ({"question": "x", "dataset_ids": ds}, "`dataset_ids` should be a list"),
             ({"dataset_ids": [ds]}, "`question` is required."),
             ({"question": "x", "dataset_ids": [ds], "document_ids": "d"}, "`documents` should be a list"),
             ({"question": "x", "dataset_ids": [ds], "top_k": 0}, "`top_k` must be greater than 0"),
             ({"question": "x", "dataset_ids": [ds], "document_ids": ["d"]}, "The datasets don't own the document d")]
    for payload, message in cases:
        res = await live.call("POST", "/api/v1/retrieval", json=payload)
        assert (res["code"], res["message"]) == (102, message), payload
    stolen = await live.call("POST", "/api/v1/retrieval", json={"question": "x", "dataset_ids": [ds]}, key=live.key_b)
    assert (stolen["code"], stolen["message"]) == (102, f"You don't own the dataset {ds}.")
    blank = await live.call("POST", "/api/v1/retrieval", json={"question": " ", "dataset_ids": [ds]})
    assert blank["data"] == {"total": 0, "chunks": [], "doc_aggs": {}}  # RAGFlow answers an empty question so
    found = await live.call("POST", "/api/v1/retrieval", json={"question": "radiator valve", "dataset_ids": [ds]})
    assert found["data"]["chunks"][0]["document_keyword"] == "a.txt" and found["data"]["doc_aggs"][0]["count"] == 1
