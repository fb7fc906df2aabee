"""RAGFlow's document-metadata, ingestion and embedding-check routes (gateway/routes/document_metadata.py,
ingestions.py), the list's metadata filters, the upload's and retrieval's answers RAGFlow's code gives, and
the agent support routes, over HTTP against the real retrieval service and orchestrator."""

from __future__ import annotations

import json

import aiohttp

from gateway.routes.retrieve import highlighted

EMBED = "bow@Scripted"


async def _seeded(live, metas: list[dict]) -> tuple[str, list[str]]:
    """A dataset with one document per `metas` entry, each with those meta_fields."""
    res = await live.call("POST", "/api/v1/datasets", json={"name": "meta", "embedding_model": EMBED})
    ds = res["data"]["id"]
    ids = []
    for i, meta in enumerate(metas):
        form = aiohttp.FormData()
        form.add_field("file", f"Radiator valve note {i}.".encode(), filename=f"n{i}.txt",
                       content_type="application/octet-stream")
        doc = (await live.call("POST", f"/api/v1/datasets/{ds}/documents", data=form))["data"][0]
        ids.append(doc["id"])
        if meta:
            res = await live.call("PATCH", f"/api/v1/datasets/{ds}/documents/{doc['id']}", json={"meta_fields": meta})
            assert res["code"] == 0, res
    return ds, ids


async def test_metadata_summary_and_flattened(live):
    ds, ids = await _seeded(live, [{"tags": ["foo", "bar"], "author": "alice", "year": 2024},
                                   {"tags": ["foo"], "author": "bob"}, {}])
    summary = (await live.call("GET", f"/api/v1/datasets/{ds}/metadata/summary"))["data"]["summary"]
    assert summary["tags"] == {"type": "list", "values": [["foo", 2], ["bar", 1]]}
    assert summary["year"] == {"type": "number", "values": [["2024", 1]]}
    one = await live.call("GET", f"/api/v1/datasets/{ds}/metadata/summary", params={"doc_ids": ids[1]})
    assert one["data"]["summary"]["author"]["values"] == [["bob", 1]]
    theirs = await live.call("GET", f"/api/v1/datasets/{ds}/metadata/summary", key=live.key_b)
    assert (theirs["code"], theirs["message"]) == (102, f"You don't own the dataset {ds}. ")

    flat = await live.call("GET", "/api/v1/datasets/metadata/flattened", params={"dataset_ids": ds})
    assert flat["code"] == 0 and sorted(flat["data"]["tags"]["foo"]) == sorted(ids[:2])
    assert (await live.call("GET", "/api/v1/datasets/metadata/flattened"))["message"] == \
        "Lack of dataset_ids in query parameters"
    other = await live.call("GET", "/api/v1/datasets/metadata/flattened", params={"dataset_ids": "nope"})
    assert (other["code"], other["message"]) == (102, "No authorization for dataset 'nope'")


async def test_batch_update_checks_updates_and_deletes_as_ragflow(live):
    ds, ids = await _seeded(live, [{"tags": ["a"], "status": "new"}, {"status": "done"}])
    path = f"/api/v1/datasets/{ds}/documents/metadatas"
    for payload, message in [({"selector": [1]}, "selector must be an object."),
                             ({"updates": {"k": 1}}, "updates and deletes must be lists."),
                             ({"selector": {"metadata_condition": [1]}}, "metadata_condition must be an object."),
                             ({"selector": {"document_ids": "x"}}, "document_ids must be a list."),
                             ({"updates": [{"key": ""}]}, "Each update requires key and value."),
                             ({"deletes": [{"x": 1}]}, "Each delete requires key."),
                             ({"selector": {"document_ids": ["x"]}}, f"These documents do not belong to dataset {ds}: x")]:
        res = await live.call("PATCH", path, json=payload)
        assert (res["code"], res["message"]) == (102, message), payload
    theirs = await live.call("PATCH", path, json={}, key=live.key_b)
    assert theirs["message"] == f"You don't own the dataset {ds}."
    # a list gets the value appended, anything else replaced; a key absent is added
    res = await live.call("PATCH", path, json={"selector": {"document_ids": ids},
                                               "updates": [{"key": "tags", "value": "b"}, {"key": "status", "value": "x"}]})
    assert res["data"] == {"updated": 2, "matched_docs": 2}
    docs = {d["id"]: d["meta_fields"] for d in (await live.call("GET", f"/api/v1/datasets/{ds}/documents"))["data"]["docs"]}
    assert docs[ids[0]] == {"tags": ["a", "b"], "status": "x"} and docs[ids[1]] == {"status": "x", "tags": "b"}
    # narrowed by a metadata condition; a delete of one list item, then of a key
    cond = {"conditions": [{"name": "tags", "comparison_operator": "is", "value": "a"}]}
    res = await live.call("PATCH", path, json={"selector": {"document_ids": ids, "metadata_condition": cond},
                                               "deletes": [{"key": "tags", "value": "a"}, {"key": "status"}]})
    assert res["data"] == {"updated": 1, "matched_docs": 1}
    docs = {d["id"]: d["meta_fields"] for d in (await live.call("GET", f"/api/v1/datasets/{ds}/documents"))["data"]["docs"]}
    assert docs[ids[0]] == {"tags": ["b"]}
    # RAGFlow's code: no document ids selects nothing; the older POST path answers the same
    res = await live.call("POST", f"/api/v1/datasets/{ds}/metadata/update", json={"updates": [{"key": "k", "value": 1}]})
    assert res["data"] == {"updated": 0, "matched_docs": 0}


async def test_document_list_filters_by_metadata(live):
    ds, ids = await _seeded(live, [{"status": "done"}, {"status": "new"}, {}])
    path = f"/api/v1/datasets/{ds}/documents"
    cond = json.dumps({"conditions": [{"name": "status", "comparison_operator": "is", "value": "done"}]})
    listed = (await live.call("GET", path, params={"metadata_condition": cond}))["data"]
    assert [d["id"] for d in listed["docs"]] == [ids[0]] and listed["total"] == 1
    simple = (await live.call("GET", path, params={"metadata": json.dumps({"status": ["new", "done"]})}))["data"]
    assert sorted(d["id"] for d in simple["docs"]) == sorted(ids[:2])
    bad = await live.call("GET", path, params={"metadata_condition": "{bad"})
    assert (bad["code"], bad["message"]) == (102, "metadata_condition must be valid JSON: {bad.")
    assert (await live.call("GET", path, params={"metadata_condition": "[1]"}))["message"] == \
        "metadata_condition must be an object."


async def test_document_metadata_config(live):
    ds, ids = await _seeded(live, [{}])
    path = f"/api/v1/datasets/{ds}/documents/{ids[0]}/metadata/config"
    missing = await live.call("PUT", path, json={})
    assert (missing["code"], missing["message"]) == (101, "metadata is required")
    res = await live.call("PUT", path, json={"metadata": {"author": "alice"}})
    assert res["code"] == 0 and res["data"]["parser_config"]["metadata"] == {"author": "alice"}
    assert "raptor" not in res["data"]["parser_config"]
    gone = await live.call("PUT", f"/api/v1/datasets/{ds}/documents/nope/metadata/config", json={"metadata": {}})
    assert gone["message"] == f"document nope not found in dataset {ds}"
    theirs = await live.call("PUT", path, json={"metadata": {}}, key=live.key_b)
    assert theirs["message"] == "you don't own the dataset"


async def test_ingestions_and_embedding_check(live):
    ds, _ = await _seeded(live, [{}])
    summary = (await live.call("GET", f"/api/v1/datasets/{ds}/ingestions/summary"))["data"]
    assert summary["doc_num"] == 1 and summary["status"]["unstart_count"] == 1 and summary["token_num"] == 0
    logs = await live.call("GET", f"/api/v1/datasets/{ds}/ingestions", params={"create_date_from": "2025-02-01"})
    assert logs["data"] == {"total": 0, "logs": []}
    assert (await live.call("GET", f"/api/v1/datasets/{ds}/ingestions/x"))["message"] == "Log not found"
    assert (await live.call("GET", "/api/v1/datasets/nope/ingestions"))["message"] == "no authorization"
    assert (await live.call("GET", f"/api/v1/datasets/{ds}/ingestions", params={"log_type": "x"}))["code"] == 102
    check = f"/api/v1/datasets/{ds}/embedding/check"
    assert (await live.call("POST", check, json={}))["message"] == "`embd_id` is required."
    assert (await live.call("POST", check, json={"embd_id": EMBED}))["message"] == \
        "No embedded chunks are available to compare."


async def test_upload_to_a_dataset_it_cannot_find(live):
    form = aiohttp.FormData()
    form.add_field("file", b"x", filename="a.txt", content_type="text/plain")
    res = await live.call("POST", "/api/v1/datasets/nope/documents", data=form)
    assert (res["code"], res["message"]) == (102, "Can't find the dataset with ID nope!")


async def test_retrieval_answers_as_ragflows_code(live):
    ds, _ = await _seeded(live, [{}])
    base = {"question": "radiator", "dataset_ids": [ds]}
    for extra, code, message in [({"top_k": "a"}, 100, "invalid literal for int()"),
                                 ({"vector_similarity_weight": "a"}, 100, "could not convert string to float"),
                                 ({"highlight": "maybe"}, 102, "`highlight` should be a boolean"),
                                 ({"page_size": 101}, 100, "page_size must be less than or equal to 100"),
                                 ({"page": "a", "vector_similarity_weight": 10}, 0, "")]:
        res = await live.call("POST", "/api/v1/retrieval", json={**base, **extra})
        assert res["code"] == code and message in res["message"], (extra, res)
    assert highlighted("Bleed the Radiator valve.", "radiator valves") == "Bleed the <em>Radiator</em> valve."


async def test_agent_support_routes(live):
    from gateway.routes.agents import CITATION_GUIDELINES
    from services.orchestrator.components._llm import CITATION_PROMPT

    assert CITATION_GUIDELINES == CITATION_PROMPT  # the gateway's copy of what the Agent node uses
    prompts = await live.call("GET", "/api/v1/agents/prompts")
    assert prompts["code"] == 0 and prompts["data"]["citation_guidelines"] == CITATION_PROMPT
    assert set(prompts["data"]) == {"task_analysis", "plan_generation", "reflection", "citation_guidelines"}
    assert (await live.call("GET", "/api/v1/agents/templates"))["data"] == []
    db = await live.call("POST", "/api/v1/agents/test_db_connection", json={"db_type": "mysql"})
    assert (db["code"], db["message"]) == (101, "required argument are missing: database,username,host,port,password; ")
    db = await live.call("POST", "/api/v1/agents/test_db_connection", json=dict.fromkeys(
        ("db_type", "database", "username", "host", "port", "password"), "x"))
    assert db["code"] == 102
    rerun = await live.call("POST", "/api/v1/agents/rerun", json={"id": "flow-1"})
    assert (rerun["code"], rerun["message"]) == (101, "required argument are missing: dsl,component_id; ")
    rerun = await live.call("POST", "/api/v1/agents/rerun", json={"id": "f", "dsl": {}, "component_id": "c"})
    assert (rerun["code"], rerun["message"]) == (102, "Document not found.")
