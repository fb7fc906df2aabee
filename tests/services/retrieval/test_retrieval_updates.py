"""UpdateDataset, UpdateDocument and ListDatasets' order, and what search makes of a chunk's `available` and
important keywords and of a disabled document; through a real gRPC server, against every backend (the
`stack` fixture: sqlite, sqlite-vec, and weaviate when TRELLIS_WEAVIATE_URL names a server)."""

from __future__ import annotations

import json

import grpc
import pytest
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb


async def _fails(call, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    return err.value.details()


def _update_dataset(stack, dataset_id: str, **fields) -> rr_pb.UpdateDatasetRequest:
    return rr_pb.UpdateDatasetRequest(tenant_id=fields.pop("tenant", stack.tenant), dataset_id=dataset_id, **fields)


def _update_document(stack, dataset_id: str, document_id: str, **fields) -> rr_pb.UpdateDocumentRequest:
    return rr_pb.UpdateDocumentRequest(tenant_id=stack.tenant, dataset_id=dataset_id, document_id=document_id, **fields)


async def _chunk(stack, ds: str, doc: str, content: str, **extra) -> rr_pb.Chunk:
    req = rr_pb.AddChunkRequest(tenant_id=stack.tenant, dataset_id=ds, document_id=doc, content=content,
                                extra_json=json.dumps(extra))
    return (await stack.stub.AddChunk(req, timeout=30)).chunk


async def test_update_dataset_changes_only_what_is_given(stack):
    ds = await stack.dataset("kb")
    await stack.dataset("other")
    resp = await stack.stub.UpdateDataset(_update_dataset(stack, ds.id, name=" renamed ", description="about boilers",
                                                          settings_json='{"pagerank": 3}'))
    got = resp.dataset
    assert (got.name, got.description, got.settings_json, got.embedding_model) == ("renamed", "about boilers",
                                                                                  '{"pagerank": 3}', ds.embedding_model)
    assert got.updated_at.ToNanoseconds() > ds.created_at.ToNanoseconds()
    only_name = (await stack.stub.UpdateDataset(_update_dataset(stack, ds.id, name="again"))).dataset
    assert (only_name.description, only_name.settings_json) == ("about boilers", '{"pagerank": 3}')
    listed = (await stack.stub.ListDatasets(rr_pb.ListDatasetsRequest(tenant_id=stack.tenant, name="again"))).datasets
    assert [d.id for d in listed] == [ds.id]
    assert "already exists" in await _fails(stack.stub.UpdateDataset(_update_dataset(stack, ds.id, name="other")),
                                            grpc.StatusCode.ALREADY_EXISTS)
    await _fails(stack.stub.UpdateDataset(_update_dataset(stack, ds.id, name="other", tenant="someone-else")),
                 grpc.StatusCode.NOT_FOUND)
    await _fails(stack.stub.UpdateDataset(_update_dataset(stack, "f" * 32, name="x")), grpc.StatusCode.NOT_FOUND)
    assert "name" in await _fails(stack.stub.UpdateDataset(_update_dataset(stack, ds.id, name="  ")),
                                  grpc.StatusCode.INVALID_ARGUMENT)
    assert "settings_json" in await _fails(stack.stub.UpdateDataset(_update_dataset(stack, ds.id, settings_json="[1]")),
                                           grpc.StatusCode.INVALID_ARGUMENT)


async def test_embedding_model_change_re_embeds_the_chunks_held(stack):
    ds = await stack.dataset("models")  # bow@Scripted: 256 dimensions
    await stack.stub.UpdateDataset(_update_dataset(stack, ds.id, embedding_model="tiny@Scripted"))  # 8 dimensions
    doc = await stack.ingest(ds.id, "a.txt", "The lighthouse keeper polishes the lens.")
    assert doc.status == rr_pb.DOCUMENT_STATUS_DONE
    assert (await stack.search("lighthouse lens", [ds.id])).chunks[0].document_id == doc.id
    # Holding chunks, the model may change (RAGFlow allows it): each chunk is embedded again with it.
    changed = (await stack.stub.UpdateDataset(_update_dataset(stack, ds.id, embedding_model="bow@Scripted"))).dataset
    assert changed.embedding_model == "bow@Scripted" and changed.chunk_count == 1
    hit = (await stack.search("lighthouse lens", [ds.id], keywords_similarity_weight=0.0)).chunks[0]
    assert hit.document_id == doc.id and hit.vector_similarity > 0.5  # the query's 256-dim vector meets the chunk's
    again = await stack.ingest(ds.id, "b.txt", "Zebras graze on the savanna.")
    assert again.status == rr_pb.DOCUMENT_STATUS_DONE, again.error
    # A model that cannot embed leaves the dataset as it was.
    await _fails(stack.stub.UpdateDataset(_update_dataset(stack, ds.id, embedding_model="missing@Scripted")),
                 grpc.StatusCode.FAILED_PRECONDITION)
    listed = await stack.stub.ListDatasets(rr_pb.ListDatasetsRequest(tenant_id=stack.tenant))
    assert [d.embedding_model for d in listed.datasets if d.id == ds.id] == ["bow@Scripted"]
    hit = (await stack.search("zebras savanna", [ds.id], keywords_similarity_weight=0.0)).chunks[0]
    assert hit.document_id == again.id and hit.vector_similarity > 0.5


async def test_list_datasets_by_creation_or_update_time_either_way(stack):
    a, b, c = [await stack.dataset(name) for name in ("a", "b", "c")]
    await stack.stub.UpdateDataset(_update_dataset(stack, a.id, description="touched"))

    async def names(**order) -> list[str]:
        req = rr_pb.ListDatasetsRequest(tenant_id=stack.tenant, **order)
        return [d.name for d in (await stack.stub.ListDatasets(req)).datasets]

    assert await names() == ["c", "b", "a"]
    assert await names(ascending=True) == ["a", "b", "c"]
    assert await names(order_by=rr_pb.DATASET_ORDER_UPDATE_TIME) == ["a", "c", "b"]
    assert await names(order_by=rr_pb.DATASET_ORDER_UPDATE_TIME, ascending=True) == ["b", "c", "a"]
    page = rr_pb.ListDatasetsRequest(tenant_id=stack.tenant, order_by=rr_pb.DATASET_ORDER_CREATE_TIME, ascending=True,
                                     page=2, page_size=2)
    assert [d.id for d in (await stack.stub.ListDatasets(page)).datasets] == [c.id]


async def test_update_document_renames_replaces_metadata_and_disables(stack):
    ds = await stack.dataset()
    doc = await stack.ingest(ds.id, "notes.txt", "The weather station reports rainfall in millimetres.")
    await stack.ingest(ds.id, "taken.txt", "Penguins cannot fly.")
    got = (await stack.stub.UpdateDocument(_update_document(stack, ds.id, doc.id, name="station.txt",
                                                            metadata_json='{"lang": "en"}',
                                                            settings_json='{"chunk_method": "qa"}'))).document
    assert (got.name, json.loads(got.metadata_json), got.settings_json, got.disabled) == \
        ("station.txt", {"lang": "en"}, '{"chunk_method": "qa"}', False)
    assert got.chunk_count == doc.chunk_count and got.status == rr_pb.DOCUMENT_STATUS_DONE
    hit = (await stack.search("rainfall", [ds.id])).chunks[0]
    assert (hit.document_name, json.loads(hit.metadata_json)) == ("station.txt", {"lang": "en"})
    assert "already exists" in await _fails(
        stack.stub.UpdateDocument(_update_document(stack, ds.id, doc.id, name="taken.txt")), grpc.StatusCode.ALREADY_EXISTS)
    await _fails(stack.stub.UpdateDocument(_update_document(stack, ds.id, "0" * 32, name="x.txt")), grpc.StatusCode.NOT_FOUND)
    assert "metadata_json" in await _fails(
        stack.stub.UpdateDocument(_update_document(stack, ds.id, doc.id, metadata_json="{nope")),
        grpc.StatusCode.INVALID_ARGUMENT)

    await stack.stub.UpdateDocument(_update_document(stack, ds.id, doc.id, disabled=True))
    listed = (await stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id))).documents
    assert {d.name: d.disabled for d in listed} == {"station.txt": True, "taken.txt": False}
    found = (await stack.search("rainfall weather station", [ds.id])).chunks
    assert doc.id not in [h.document_id for h in found] and found  # a disabled document is never found, the other is
    await stack.stub.UpdateDocument(_update_document(stack, ds.id, doc.id, disabled=False))
    assert (await stack.search("rainfall weather station", [ds.id])).chunks[0].document_id == doc.id


async def test_a_chunk_switched_off_is_never_returned(stack):
    ds = await stack.dataset()
    doc = await stack.ingest(ds.id, "base.txt", "Zebras graze on the savanna.")
    off = await _chunk(stack, ds.id, doc.id, "The boiler warranty lasts five years.", available=False)
    assert (await stack.search("boiler warranty", [ds.id], similarity_threshold=0.1)).chunks == []
    update = rr_pb.UpdateChunkRequest(tenant_id=stack.tenant, dataset_id=ds.id, document_id=doc.id, chunk_id=off.id,
                                      extra_json='{"available": true}')
    await stack.stub.UpdateChunk(update, timeout=30)
    assert [c.id for c in (await stack.search("boiler warranty", [ds.id], similarity_threshold=0.1)).chunks] == [off.id]


async def test_important_keywords_are_searched_and_rank_their_chunk_first(stack):
    ds = await stack.dataset()
    doc = await stack.ingest(ds.id, "base.txt", "Zebras graze on the savanna.")
    text = "Bleed the radiator valve every autumn."
    plain = await _chunk(stack, ds.id, doc.id, text)
    # the same words (the same text again would be the same chunk, written over)
    keyed = await _chunk(stack, ds.id, doc.id, text.upper(), important_keywords=["heating"], questions=["How to bleed?"])
    # A term only in the keywords is found by the keyword search and counts as a found term.
    only_keywords = (await stack.search("heating", [ds.id], keywords_similarity_weight=1.0)).chunks
    assert [c.id for c in only_keywords] == [keyed.id] and only_keywords[0].term_similarity > 0.99
    assert json.loads(only_keywords[0].extra_json)["important_keywords"] == ["heating"]
    both = (await stack.search("radiator heating", [ds.id])).chunks
    assert [c.id for c in both[:2]] == [keyed.id, plain.id] and both[0].similarity > both[1].similarity
    # Equal scores (the term is in both texts): the chunk whose keywords hold it comes first.
    tie = (await stack.search("bleed", [ds.id], keywords_similarity_weight=1.0)).chunks
    assert [c.id for c in tie] == [keyed.id, plain.id]
    assert tie[0].similarity == pytest.approx(tie[1].similarity)


async def test_the_uploaded_file_is_kept_until_its_document_goes(stack):
    ds = await stack.dataset()
    raw = b"%PDF-1.4 not really a pdf"
    broken = await stack.ingest(ds.id, "broken.pdf", raw)  # kept even when parsing fails
    good = await stack.ingest(ds.id, "a.txt", "first version")
    again = await stack.ingest(ds.id, "a.txt", "second version", document_id=good.id)  # a re-ingest replaces it

    async def file_of(document_id: str, dataset_id: str = ds.id) -> bytes:
        req = rr_pb.GetDocumentFileRequest(tenant_id=stack.tenant, dataset_id=dataset_id, document_id=document_id)
        return (await stack.stub.GetDocumentFile(req)).content

    assert broken.status == rr_pb.DOCUMENT_STATUS_FAILED and await file_of(broken.id) == raw
    assert again.id == good.id and await file_of(good.id) == b"second version"
    other = await stack.dataset("other")
    await _fails(file_of(good.id, other.id), grpc.StatusCode.NOT_FOUND)  # the document of another dataset
    await stack.stub.DeleteDocument(rr_pb.DeleteDocumentRequest(tenant_id=stack.tenant, dataset_id=ds.id, document_id=good.id))
    await _fails(file_of(good.id), grpc.StatusCode.NOT_FOUND)
    await stack.stub.DeleteDataset(rr_pb.DeleteDatasetRequest(tenant_id=stack.tenant, dataset_id=ds.id))
    await _fails(file_of(broken.id), grpc.StatusCode.NOT_FOUND)


async def test_a_datasets_pagerank_is_added_to_its_chunks_similarity(stack):
    plain, ranked = await stack.dataset("plain"), await stack.dataset("ranked")
    text = "The lighthouse keeper polishes the lens every night."
    await stack.ingest(plain.id, "a.txt", text)
    await stack.ingest(ranked.id, "b.txt", text)
    before = (await stack.search("lighthouse lens", [plain.id, ranked.id])).chunks
    assert before[0].similarity == pytest.approx(before[1].similarity)
    got = (await stack.stub.UpdateDataset(_update_dataset(stack, ranked.id, pagerank=7))).dataset
    assert got.pagerank == 7
    after = (await stack.search("lighthouse lens", [plain.id, ranked.id])).chunks
    assert [c.dataset_id for c in after] == [ranked.id, plain.id]
    assert after[0].similarity == pytest.approx(after[1].similarity + 7)
    assert "pagerank" in await _fails(stack.stub.UpdateDataset(_update_dataset(stack, ranked.id, pagerank=101)),
                                      grpc.StatusCode.INVALID_ARGUMENT)


async def test_adding_content_the_document_holds_is_that_chunk_and_counts_as_ragflow_counts(stack):
    ds = await stack.dataset()
    doc = await stack.ingest(ds.id, "base.txt", "Zebras graze on the savanna.")
    first = await _chunk(stack, ds.id, doc.id, "The boiler warranty lasts five years.", important_keywords=["boiler"])
    again = await _chunk(stack, ds.id, doc.id, "The boiler warranty lasts five years.", questions=["How long?"])
    assert again.id == first.id and json.loads(again.extra_json) == {"questions": ["How long?"]}  # written over
    listed = await stack.stub.ListChunks(rr_pb.ListChunksRequest(tenant_id=stack.tenant, dataset_id=ds.id,
                                                                 document_id=doc.id), timeout=30)
    assert listed.total == 2  # the ingested chunk and the added one
    assert listed.document.chunk_count == 3  # RAGFlow's counter: 1 ingested, +1 per add
    await stack.stub.DeleteChunks(rr_pb.DeleteChunksRequest(tenant_id=stack.tenant, dataset_id=ds.id, document_id=doc.id,
                                                            chunk_ids=[first.id]), timeout=30)
    listed = await stack.stub.ListChunks(rr_pb.ListChunksRequest(tenant_id=stack.tenant, dataset_id=ds.id,
                                                                 document_id=doc.id), timeout=30)
    assert (listed.total, listed.document.chunk_count) == (1, 2)  # minus the chunks removed


async def test_list_documents_by_metadata(stack):
    ds = await stack.dataset()
    tagged = await stack.ingest(ds.id, "a.txt", "Zebras graze.", metadata=json.dumps({"status": "done", "tags": ["x", "y"]}))
    await stack.ingest(ds.id, "b.txt", "Lions hunt.", metadata=json.dumps({"status": "new"}))
    req = rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id,
                                     metadata_filter=[rr_pb.MetadataCondition(key="tags", operator="is", value="y")])
    resp = await stack.stub.ListDocuments(req, timeout=30)
    assert [d.id for d in resp.documents] == [tagged.id] and resp.total == 1
    req.metadata_filter.append(rr_pb.MetadataCondition(key="status", operator="=", value="new"))
    req.metadata_logic = "or"
    assert (await stack.stub.ListDocuments(req, timeout=30)).total == 2
