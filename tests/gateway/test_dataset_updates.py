"""RAGFlow's update routes and list orders over HTTP against the real retrieval service: PUT a dataset, PUT
and PATCH a document, the dataset and document list orders and filters, and what retrieval makes of a
disabled document, a chunk switched off and a chunk's important keywords. Codes and messages are those of
RAGFlow's restful_apis (dataset_api.py, document_api.py) and api/utils/validation_utils.py."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest

EMBED = "bow@Scripted"


async def _dataset(live, name: str, **extra) -> dict:
    res = await live.call("POST", "/api/v1/datasets", json={"name": name, "embedding_model": EMBED, **extra})
    assert res["code"] == 0, res
    return res["data"]


async def _upload(live, dataset_id: str, *files: tuple[str, bytes]) -> list[dict]:
    form = aiohttp.FormData()
    for name, content in files:
        form.add_field("file", content, filename=name, content_type="application/octet-stream")
    res = await live.call("POST", f"/api/v1/datasets/{dataset_id}/documents", data=form)
    assert res["code"] == 0, res
    assert {d["run"] for d in res["data"]} == {"UNSTART"}
    return await _parsed(live, dataset_id, res["data"])


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


async def _retrieve(live, dataset_id: str, question: str, **extra) -> list[dict]:
    res = await live.call("POST", "/api/v1/retrieval", json={"dataset_ids": [dataset_id], "question": question,
                                                             "similarity_threshold": 0.0, **extra})
    assert res["code"] == 0, res
    return res["data"]["chunks"]


# ---- PUT /api/v1/datasets/{id} --------------------------------------------------------------------------------

async def test_update_dataset_changes_what_is_given(live):
    ds = await _dataset(live, "before")
    await _dataset(live, "taken")
    avatar = "data:image/png;base64,iVBORw0KGgo="
    res = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={
        "name": "after", "description": "boilers", "avatar": avatar, "permission": "team", "pagerank": 7})
    assert res["code"] == 0, res
    got = res["data"]
    assert (got["name"], got["description"], got["avatar"], got["permission"], got["pagerank"]) == \
        ("after", "boilers", avatar, "team", 7)
    assert got["parser_config"] == ds["parser_config"] and got["chunk_method"] == "naive" and got["connectors"] == []
    assert got["update_time"] >= got["create_time"]
    listed = (await live.call("GET", "/api/v1/datasets", params={"id": ds["id"]}))["data"][0]
    assert (listed["name"], listed["description"], listed["pagerank"]) == ("after", "boilers", 7)
    await _upload(live, ds["id"], ("a.txt", b"The lighthouse keeper polishes the lens."))
    [hit] = await _retrieve(live, ds["id"], "lighthouse lens")
    assert 7.0 < hit["similarity"] < 8.0  # RAGFlow adds the pagerank to the score as it is
    # Its own name in another case is no clash; another dataset's name (in any case) is.
    assert (await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"name": "AFTER"}))["data"]["name"] == "AFTER"
    dup = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"name": "TAKEN"})
    assert dup == {"code": 102, "message": "Dataset name 'TAKEN' already exists", "data": False}


async def test_update_chunk_method_and_parser_config_as_ragflow_merges_them(live):
    ds = await _dataset(live, "methods")
    merged = (await live.call("PUT", f"/api/v1/datasets/{ds['id']}",
                              json={"parser_config": {"chunk_token_num": 256, "raptor": {"max_token": 1024}}}))["data"]
    config = merged["parser_config"]
    assert config["chunk_token_num"] == 256 and config["raptor"]["max_token"] == 1024
    assert config["raptor"]["use_raptor"] is True and config["delimiter"] == "\n"  # kept from before
    assert config["enable_children"] is False and config["children_delimiter"] == ""  # no parent_child given: off
    qa = (await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"chunk_method": "qa"}))["data"]
    assert qa["chunk_method"] == "qa"  # a new method without parser_config: that method's defaults
    assert qa["parser_config"] == {"table_context_size": 0, "image_context_size": 0, "raptor": {"use_raptor": False},
                                   "graphrag": {"use_graphrag": False}}


async def test_embedding_model_may_change_while_the_dataset_has_chunks(live):
    ds = await _dataset(live, "fixed")
    assert (await live.call("PUT", f"/api/v1/datasets/{ds['id']}",
                            json={"embedding_model": "tiny@Scripted"}))["data"]["embedding_model"] == "tiny@Scripted"
    await _upload(live, ds["id"], ("a.txt", b"The lighthouse keeper polishes the lens."))
    # RAGFlow allows it; the chunks held are embedded again with the new model.
    res = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"embedding_model": EMBED})
    assert res["code"] == 0 and res["data"]["embedding_model"] == EMBED, res
    [hit] = await _retrieve(live, ds["id"], "lighthouse lens", vector_similarity_weight=1.0)
    assert hit["vector_similarity"] > 0.5
    unknown = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"embedding_model": "nope@Scripted"})
    assert unknown == {"code": 102, "message": "Model nope@Scripted not found for model embedding", "data": False}
    no_factory = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"embedding_model": "x@Nowhere"})
    assert no_factory["message"] == "Provider Nowhere not found for model x@Nowhere."


@pytest.mark.parametrize("payload, expected", [
    ({"name": ""}, "Field: <name> - Message: <String should have at least 1 character> - Value: <>"),
    ({"pagerank": 101}, "Field: <pagerank> - Message: <Input should be less than or equal to 100> - Value: <101>"),
    ({"pagerank": "1"}, "Field: <pagerank> - Message: <Input should be a valid integer> - Value: <1>"),
    ({"permission": "all"}, "Field: <permission> - Message: <Input should be 'me' or 'team'> - Value: <all>"),
    ({"chunk_method": "nope"}, "Input should be 'naive', 'book', 'email', 'laws', 'manual', 'one', 'paper', 'picture', "
                               "'presentation', 'qa', 'table', 'tag' or 'resume'"),
    ({"embedding_model": "bow"}, "embedding model identifier must follow <model_name>@<provider> format"),
    ({"shape": "round"}, "Field: <shape> - Message: <Extra inputs are not permitted> - Value: <round>"),
    ({"parser_config": {"chunk_token_num": 0}}, "Field: <parser_config.chunk_token_num> - Message: <Input should be "
                                                "greater than or equal to 1> - Value: <0>"),
])
async def test_update_refuses_what_ragflow_refuses(live, payload, expected):
    ds = await _dataset(live, "strict")
    res = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json=payload)
    assert res["code"] == 101 and expected in res["message"], res


async def test_update_of_nothing_or_of_an_unknown_dataset(live):
    ds = await _dataset(live, "mine")
    empty = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={})
    assert empty == {"code": 102, "message": "no properties were modified", "data": False}
    unknown = uuid.uuid4().hex
    tenant_b = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", json={"name": "x"}, key=live.key_b)
    assert tenant_b["code"] == 102 and tenant_b["message"].endswith(f"lacks permission for dataset '{ds['id']}'")
    missing = await live.call("PUT", f"/api/v1/datasets/{unknown}", json={"name": "x"})
    assert missing["code"] == 102 and missing["message"].endswith(f"lacks permission for dataset '{unknown}'")
    bad = await live.call("PUT", "/api/v1/datasets/not-a-uuid", json={"name": "x"})
    assert bad == {"code": 101, "message": "Field: <dataset_id> - Message: <Invalid UUID format> - Value: <not-a-uuid>",
                   "data": False}
    both = await live.call("PUT", "/api/v1/datasets/not-a-uuid", json={"name": ""})
    assert both["code"] == 101 and both["message"].splitlines()[1].startswith("Field: <dataset_id>")
    wrong_type = await live.call("PUT", f"/api/v1/datasets/{ds['id']}", data="{}", headers={"Content-Type": "text/plain"})
    assert wrong_type["code"] == 101 and wrong_type["message"].startswith("Unsupported content type")


# ---- dataset list order -----------------------------------------------------------------------------------------

async def test_list_datasets_honours_orderby_and_desc(live):
    for name in ("first", "second", "third"):
        await _dataset(live, name)
    first = (await live.call("GET", "/api/v1/datasets", params={"name": "first"}))["data"][0]
    await live.call("PUT", f"/api/v1/datasets/{first['id']}", json={"description": "touched last"})

    async def names(**params) -> list[str]:
        res = await live.call("GET", "/api/v1/datasets", params=params)
        assert res["code"] == 0, res
        return [d["name"] for d in res["data"]]

    assert await names() == ["third", "second", "first"]
    assert await names(desc="false") == ["first", "second", "third"]
    assert await names(orderby="update_time") == ["first", "third", "second"]
    assert await names(orderby="update_time", desc="false") == ["second", "third", "first"]
    assert await names(desc="false", page=2, page_size=2) == ["third"]
    ids = [d["id"] for d in (await live.call("GET", "/api/v1/datasets"))["data"]]
    picked = await live.call("GET", f"/api/v1/datasets?ids={ids[0]}&ids={ids[2]}&desc=false")
    assert [d["id"] for d in picked["data"]] == [ids[2], ids[0]] and picked["total"] == 2
    both = await live.call("GET", "/api/v1/datasets", params={"id": ids[0], "ids": ids[1]})
    assert both["code"] == 102 and both["message"].startswith("Should not provide both 'id'")


# ---- PUT/PATCH /api/v1/datasets/{id}/documents/{doc} -------------------------------------------------------------

@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_update_document_name_meta_fields_and_chunk_method(live, method):
    ds = await _dataset(live, f"docs-{method}")
    doc, other = await _upload(live, ds["id"], ("notes.txt", b"The weather station reports rainfall."),
                               ("other.txt", b"Penguins cannot fly."))
    path = f"/api/v1/datasets/{ds['id']}/documents/{doc['id']}"
    res = await live.call(method, path, json={"name": "station.txt", "meta_fields": {"lang": "en", "tags": ["a", 1]},
                                              "chunk_method": "qa"})
    assert res["code"] == 0, res
    got = res["data"]
    assert (got["name"], got["meta_fields"], got["chunk_method"], got["run"], got["chunk_count"]) == \
        ("station.txt", {"lang": "en", "tags": ["a", 1]}, "qa", "DONE", doc["chunk_count"])
    assert got["parser_config"]["raptor"] == {"use_raptor": False}  # the qa method's defaults
    listed = await live.call("GET", f"/api/v1/datasets/{ds['id']}/documents", params={"id": doc["id"]})
    assert listed["data"]["docs"][0]["name"] == "station.txt" and listed["data"]["docs"][0]["chunk_method"] == "qa"
    assert (await _retrieve(live, ds["id"], "rainfall"))[0]["document_keyword"] == "station.txt"
    config = await live.call(method, path, json={"parser_config": {"chunk_token_num": 64}})
    assert config["data"]["parser_config"]["chunk_token_num"] == 64
    assert config["data"]["parser_config"]["raptor"] == {"use_raptor": False}  # merged into the document's own
    for payload, code, message in [
        ({"name": "other.txt"}, 102, "Duplicated document name in the same dataset."),
        ({"name": "station.pdf"}, 101, "The extension of file can't be changed"),
        ({"name": "a" * 252 + ".txt"}, 101, "File name must be 255 bytes or less."),
        ({"name": None}, 102, "Field: <name> - Message: <Input should be a valid string> - Value: <None>"),
        ({"chunk_count": 99}, 102, "can't change `chunk_count`"),
        ({"progress": 0.5}, 102, "can't change `progress`"),
        ({"chunk_method": ""}, 102, "`chunk_method` (empty string) is not valid"),
        ({"chunk_method": "nope"}, 102, "Field: <chunk_method> - Message: <`chunk_method` nope doesn't exist> - Value: <nope>"),
        ({"enabled": 2}, 102, "Field: <enabled> - Message: <Input should be less than or equal to 1> - Value: <2>"),
        ({"meta_fields": {"k": {"nested": 1}}}, 102, "The type is not supported: {'nested': 1}"),
    ]:
        res = await live.call(method, path, json=payload)
        assert (res["code"], message in res["message"]) == (code, True), (payload, res)
    gone = await live.call(method, f"/api/v1/datasets/{ds['id']}/documents/{uuid.uuid4().hex}", json={"name": "x.txt"})
    assert gone == {"code": 102, "message": "the dataset doesn't own the document", "data": False}
    not_mine = await live.call(method, path, json={"name": "x.txt"}, key=live.key_b)
    assert not_mine == {"code": 102, "message": "you don't own the dataset", "data": False}
    assert other["name"] == "other.txt"


async def test_a_disabled_document_is_left_out_of_retrieval(live):
    ds = await _dataset(live, "enabled")
    doc, = await _upload(live, ds["id"], ("boiler.txt", b"Bleed the radiator valve every autumn."))
    path = f"/api/v1/datasets/{ds['id']}/documents/{doc['id']}"
    off = await live.call("PATCH", path, json={"enabled": 0})
    assert off["code"] == 0 and off["data"]["status"] == "0"
    assert await _retrieve(live, ds["id"], "radiator valve") == []
    on = await live.call("PATCH", path, json={"enabled": 1})
    assert on["data"]["status"] == "1"
    assert [c["document_id"] for c in await _retrieve(live, ds["id"], "radiator valve")] == [doc["id"]]


# ---- chunks in retrieval ------------------------------------------------------------------------------------------

async def test_retrieval_skips_unavailable_chunks_and_weighs_important_keywords(live):
    ds = await _dataset(live, "chunky")
    doc, = await _upload(live, ds["id"], ("base.txt", b"Zebras graze on the savanna."))
    chunks = f"/api/v1/datasets/{ds['id']}/documents/{doc['id']}/chunks"
    text = "Bleed the radiator valve every autumn."
    plain = (await live.call("POST", chunks, json={"content": text}))["data"]["chunk"]
    # The same words in another order: content of its own (the same content again would be the same chunk)
    keyed = (await live.call("POST", chunks, json={"content": "Every autumn bleed the radiator valve.",
                                                    "important_keywords": ["heating"]}))["data"]["chunk"]
    assert keyed["id"] != plain["id"]
    again = (await live.call("POST", chunks, json={"content": text, "questions": ["When?"]}))["data"]["chunk"]
    assert again["id"] == plain["id"] and again["questions"] == ["When?"]  # RAGFlow: that chunk, written over
    found = await _retrieve(live, ds["id"], "radiator heating")
    assert [c["id"] for c in found[:2]] == [keyed["id"], plain["id"]]
    assert found[0]["similarity"] > found[1]["similarity"] and found[0]["important_keywords"] == ["heating"]
    off = await live.call("PATCH", f"{chunks}/{keyed['id']}", json={"available": False})
    assert off["code"] == 0
    assert [c["id"] for c in await _retrieve(live, ds["id"], "radiator heating")][:1] == [plain["id"]]
    listed = await live.call("GET", chunks, params={"id": keyed["id"]})
    assert listed["data"]["chunks"][0]["available"] is False  # still listed, never retrieved


# ---- document list order and filters -----------------------------------------------------------------------------

async def test_list_documents_orders_and_filters(live):
    ds = await _dataset(live, "listing")
    b, a, c = await _upload(live, ds["id"], ("b.txt", b"Bees make honey."), ("a.md", b"Ants carry leaves."),
                            ("c.txt", b"Cats sleep a lot."))
    base = f"/api/v1/datasets/{ds['id']}/documents"

    async def names(query: str = "") -> list[str]:
        res = await live.call("GET", f"{base}?{query}")
        assert res["code"] == 0, res
        return [d["name"] for d in res["data"]["docs"]]

    assert await names() == ["c.txt", "a.md", "b.txt"]
    assert await names("desc=false") == ["b.txt", "a.md", "c.txt"]
    assert await names("orderby=name&desc=false") == ["a.md", "b.txt", "c.txt"]
    assert await names("orderby=name&desc=false&suffix=txt") == ["b.txt", "c.txt"]
    assert await names(f"ids={a['id']}&ids={c['id']}&orderby=name") == ["c.txt", "a.md"]
    assert await names("run=DONE&keywords=A") == ["a.md"]  # keywords: in the name, any case
    assert await names("run=1") == []
    bad_order = await live.call("GET", f"{base}?orderby=size")
    assert bad_order == {"code": 101, "message": "invalid orderby field: size", "data": False}
    bad_run = await live.call("GET", f"{base}?run=SLEEPING")
    assert bad_run["code"] == 102 and bad_run["message"] == "Invalid filter run status conditions: SLEEPING"
    assert b["name"] == "b.txt"


# ---- GET/PUT /api/v1/datasets/{id}/metadata/config ----------------------------------------------------------------

async def test_auto_metadata_config_is_kept_in_the_parser_config(live):
    ds = await _dataset(live, "meta")
    path = f"/api/v1/datasets/{ds['id']}/metadata/config"
    assert (await live.call("GET", path))["data"] == {"metadata": [], "built_in_metadata": []}
    fields = [{"key": "author", "type": "string", "description": "who wrote it"}]
    put = await live.call("PUT", path, json={"metadata": fields})
    assert put["code"] == 0
    assert put["data"] == {"metadata": [{**fields[0], "enum": None}], "built_in_metadata": []}
    assert (await live.call("GET", path))["data"]["metadata"] == [{**fields[0], "enum": None}]
    config = (await live.call("GET", f"/api/v1/datasets/{ds['id']}"))["data"]["parser_config"]
    assert config["metadata"][0]["key"] == "author" and config["chunk_token_num"] == 512  # the rest kept
    bad = await live.call("PUT", path, json={"metadata": [{"key": "x", "type": "colour"}]})
    assert bad["code"] == 101 and "Field: <metadata.0.type> - Message: <Input should be 'string', 'list', 'time' or " \
                                  "'number'> - Value: <colour>" == bad["message"]
    other = await live.call("GET", path, key=live.key_b)
    assert other["code"] == 102 and other["message"].endswith(f"lacks permission for dataset '{ds['id']}'")


# ---- GET /api/v1/datasets/{id}/documents/{doc} ----------------------------------------------------------------------

async def test_download_gives_the_uploaded_file_back(live):
    ds = await _dataset(live, "files")
    raw = "# Boiler\n\nBleed the radiator valve every autumn. Ünïcode too.".encode()
    doc, = await _upload(live, ds["id"], ("boiler_guide.md", raw))
    path = f"/api/v1/datasets/{ds['id']}/documents/{doc['id']}"
    resp = await live.client.get(path, headers=live.auth())
    assert resp.status == 200 and await resp.read() == raw
    assert resp.content_type == "text/markdown"
    assert resp.headers["Content-Disposition"] == "attachment; filename*=UTF-8''boiler_guide.md"
    # Errors are RAGFlow's bare {"code", "message"}, which the SDK's download tells from a file.
    assert await live.call("GET", f"/api/v1/datasets/{ds['id']}/documents/{uuid.uuid4().hex}") == \
        {"code": 102, "message": "document not found"}
    assert await live.call("GET", path, key=live.key_b) == {"code": 102, "message": "document not found"}
    await live.call("DELETE", f"/api/v1/datasets/{ds['id']}/documents", json={"ids": [doc["id"]]})
    assert await live.call("GET", path) == {"code": 102, "message": "document not found"}


async def test_retrieval_down_is_ragflows_105_not_a_trace(stack):
    # The stack's retrieval upstream is a port nobody listens on: the facade tries again while it cannot
    # connect, then answers in the route's dialect.
    res = await stack.client.put(f"/api/v1/datasets/{uuid.uuid4().hex}", headers=stack.auth(), json={"name": "x"})
    assert res.status == 200
    assert await res.json() == {"code": 105, "message": "the retrieval service is unavailable; try again shortly",
                                "data": False}
