"""The retrieval contract, through a real gRPC server on port 0, run against every backend.

Parametrized by the `stack` fixture: "sqlite" (in-memory vector index), "sqlite-vec" (vec0 KNN only) and
"weaviate" (only when TRELLIS_WEAVIATE_URL names a server; otherwise that parameter reports it did not run).
"""

from __future__ import annotations

import json

import grpc
import pytest
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from tests.support.pdf import make_pdf

DONE, FAILED = rr_pb.DOCUMENT_STATUS_DONE, rr_pb.DOCUMENT_STATUS_FAILED

GUIDE = """# Trellis guide

Trellis runs RAGFlow canvases as gRPC microservices. Each canvas is a graph of components.

## Installation

Run make up on a fresh machine. The gateway listens on port 8080 and the orchestrator on port 50051.

## Weather station

The weather station reports rainfall in millimetres. Humidity sensors sit on the roof of the barn.
"""


async def test_ingest_splits_along_headings_and_reports_status(stack):
    ds = await stack.dataset(size=24, overlap=4)
    doc = await stack.ingest(ds.id, "guide.md", GUIDE, metadata='{"lang": "en"}')
    assert doc.status == DONE and doc.error == ""
    assert doc.chunk_count >= 3 and doc.mime_type == "text/markdown" and doc.size == len(GUIDE.encode())
    listed = await stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id))
    assert listed.total == 1 and listed.documents[0].id == doc.id and listed.documents[0].chunk_count == doc.chunk_count
    got = (await stack.stub.ListDatasets(rr_pb.ListDatasetsRequest(tenant_id=stack.tenant))).datasets
    assert [(d.id, d.document_count, d.chunk_count) for d in got] == [(ds.id, 1, doc.chunk_count)]
    hit = (await stack.search("rainfall humidity", [ds.id], top_n=1)).chunks[0]
    # The chunk carries the path of headings it sits under, and its document's name and metadata.
    assert hit.content.startswith("Trellis guide > Weather station") and "rainfall" in hit.content
    assert (hit.document_id, hit.document_name, hit.dataset_id) == (doc.id, "guide.md", ds.id)
    assert json.loads(hit.metadata_json) == {"lang": "en"}


async def test_plain_html_and_pdf_are_parsed(stack):
    ds = await stack.dataset()
    txt = await stack.ingest(ds.id, "notes.txt", "Zebras graze on the savanna.\n\nThey sleep standing up.")
    html = await stack.ingest(ds.id, "page.html", "<html><head><title>Birds</title><script>var x='kiwi';</script></head>"
                                                  "<body><h1>Penguins</h1><p>Penguins cannot fly but swim fast.</p></body></html>")
    pdf = await stack.ingest(ds.id, "report.pdf", make_pdf(["Quarterly report", "Revenue of the glacier tours grew."]))
    assert [d.status for d in (txt, html, pdf)] == [DONE, DONE, DONE]
    assert (html.mime_type, pdf.mime_type) == ("text/html", "application/pdf")
    assert (await stack.search("kiwi", [ds.id], keywords_similarity_weight=1.0)).chunks == []  # scripts are not text
    penguin = (await stack.search("penguins swim", [ds.id], top_n=1)).chunks[0]
    assert penguin.document_id == html.id and "Birds > Penguins" in penguin.content
    glacier = (await stack.search("glacier revenue", [ds.id], top_n=1)).chunks[0]
    # One chunk holds both short pages: its positions are the PDF pages it spans.
    assert glacier.document_id == pdf.id and list(glacier.positions) == [1, 2] and "Quarterly" in glacier.content


async def test_failed_document_says_why_and_leaves_the_rest(stack):
    ds = await stack.dataset()
    good = await stack.ingest(ds.id, "good.txt", "The lighthouse keeper polishes the lens every night.")
    broken = await stack.ingest(ds.id, "broken.pdf", b"%PDF-1.4 this is not really a pdf")
    assert broken.status == FAILED and "PDF" in broken.error
    empty = await stack.ingest(ds.id, "empty.md", "   \n\n  ")
    assert empty.status == FAILED and "no text" in empty.error
    unknown_model = await stack.dataset("other", model="nope@Scripted")
    failed = await stack.ingest(unknown_model.id, "x.txt", "some words here")
    assert failed.status == FAILED and failed.error.startswith("embedding failed:") and "nope" in failed.error
    docs = (await stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id))).documents
    assert {d.name: d.status for d in docs} == {"good.txt": DONE, "broken.pdf": FAILED, "empty.md": FAILED}
    hits = (await stack.search("lighthouse lens", [ds.id])).chunks
    assert [h.document_id for h in hits] == [good.id]
    with pytest.raises(grpc.aio.AioRpcError) as err:  # refused before anything is stored
        await stack.ingest(ds.id, "archive.zip", b"PK\x03\x04", mime="application/zip")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unsupported document type" in err.value.details()


async def test_keyword_only_and_vector_only(stack):
    ds = await stack.dataset()
    a = await stack.ingest(ds.id, "a.txt", "Quantum computers use qubits.")
    await stack.ingest(ds.id, "b.txt", "Bakers knead dough for bread.")
    kw = (await stack.search("qubits", [ds.id], keywords_similarity_weight=1.0)).chunks
    assert [c.document_id for c in kw] == [a.id]
    assert kw[0].term_similarity == pytest.approx(1.0) and kw[0].similarity == pytest.approx(kw[0].term_similarity)
    vec = (await stack.search("quantum qubits", [ds.id], keywords_similarity_weight=0.0)).chunks
    assert vec[0].document_id == a.id
    for c in vec:
        assert c.similarity == pytest.approx(c.vector_similarity, abs=1e-6)
    assert vec[0].vector_similarity > 0.5 > vec[-1].vector_similarity


async def test_hybrid_weight_changes_the_order(stack):
    ds = await stack.dataset()
    # K holds three of the four query words among many others: high term similarity, low cosine.
    k = await stack.ingest(ds.id, "k.txt", "alpha beta gamma " + " ".join(f"filler{i}" for i in range(20)))
    # V repeats one query word: low term similarity, high cosine.
    v = await stack.ingest(ds.id, "v.txt", "delta delta delta delta delta delta")
    order = {}
    for w in (1.0, 0.9, 0.1, 0.0):
        res = await stack.search("alpha beta gamma delta", [ds.id], keywords_similarity_weight=w)
        order[w] = [c.document_id for c in res.chunks]
    assert order[1.0][0] == order[0.9][0] == k.id
    assert order[0.0][0] == order[0.1][0] == v.id


async def test_threshold_top_n_and_total(stack):
    ds = await stack.dataset()
    for i in range(5):
        await stack.ingest(ds.id, f"n{i}.txt", f"Nebula number {i} glows in the night sky.")
    await stack.ingest(ds.id, "other.txt", "Carrots grow underground.")
    res = await stack.search("nebula glows", [ds.id], top_n=2, similarity_threshold=0.3)
    assert len(res.chunks) == 2 and res.total == 5
    assert res.chunks[0].similarity >= res.chunks[1].similarity >= 0.3
    none = await stack.search("nebula glows", [ds.id], similarity_threshold=1.01)
    assert none.chunks == [] and none.total == 0
    assert (await stack.search("   ", [ds.id])).chunks == []


async def test_dataset_document_and_metadata_filters(stack):
    ds1, ds2 = await stack.dataset("one"), await stack.dataset("two")
    a = await stack.ingest(ds1.id, "a.txt", "Volcano eruptions spread ash.", metadata='{"year": 2021, "tags": ["geo", "hot"]}')
    b = await stack.ingest(ds1.id, "b.txt", "Volcano monitoring uses seismometers.", metadata='{"year": 2024, "author": "Ada"}')
    c = await stack.ingest(ds2.id, "c.txt", "Volcano tourism is growing.", metadata='{"year": 2024}')

    async def ids(**kw) -> set[str]:
        return {h.document_id for h in (await stack.search("volcano", **kw)).chunks}

    assert await ids(dataset_ids=[ds1.id]) == {a.id, b.id}
    assert await ids(dataset_ids=[ds1.id, ds2.id]) == {a.id, b.id, c.id}
    assert await ids(dataset_ids=[ds1.id, ds2.id], document_ids=[a.id, c.id]) == {a.id, c.id}
    cond = rr_pb.MetadataCondition
    assert await ids(dataset_ids=[ds1.id, ds2.id], metadata_filter=[cond(key="year", operator=">", value="2022")]) == {b.id, c.id}
    assert await ids(dataset_ids=[ds1.id], metadata_filter=[cond(key="tags", operator="=", value="hot")]) == {a.id}
    assert await ids(dataset_ids=[ds1.id, ds2.id], metadata_filter=[
        cond(key="year", operator="=", value="2024"), cond(key="author", operator="not empty")]) == {b.id}
    assert await ids(dataset_ids=[ds1.id, ds2.id], metadata_logic="or", metadata_filter=[
        cond(key="author", operator="contains", value="ad"), cond(key="tags", operator="=", value="geo")]) == {a.id, b.id}
    assert await ids(dataset_ids=[ds1.id], metadata_filter=[cond(key="year", operator="<", value="1900")]) == set()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.search("volcano", [ds1.id], metadata_filter=[cond(key="year", operator="~", value="1")])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "operator" in err.value.details()


async def test_delete_document_and_dataset(stack):
    ds = await stack.dataset()
    a = await stack.ingest(ds.id, "a.txt", "Orchids need humid air.")
    b = await stack.ingest(ds.id, "b.txt", "Orchids bloom in spring.")
    await stack.stub.DeleteDocument(rr_pb.DeleteDocumentRequest(tenant_id=stack.tenant, dataset_id=ds.id, document_id=a.id))
    assert [h.document_id for h in (await stack.search("orchids", [ds.id])).chunks] == [b.id]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.stub.DeleteDocument(rr_pb.DeleteDocumentRequest(tenant_id=stack.tenant, dataset_id=ds.id, document_id=a.id))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    await stack.stub.DeleteDataset(rr_pb.DeleteDatasetRequest(tenant_id=stack.tenant, dataset_id=ds.id))
    for call in (stack.search("orchids", [ds.id]),
                 stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id)),
                 stack.stub.DeleteDataset(rr_pb.DeleteDatasetRequest(tenant_id=stack.tenant, dataset_id=ds.id))):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await stack.stub.ListDatasets(rr_pb.ListDatasetsRequest(tenant_id=stack.tenant))).total == 0
    again = await stack.dataset()  # the name is free again
    assert again.id != ds.id


async def test_reingest_replaces_chunks(stack):
    ds = await stack.dataset()
    first = await stack.ingest(ds.id, "faq.md", "# FAQ\n\nThe office opens at nine.")
    assert (await stack.search("office nine", [ds.id], keywords_similarity_weight=1.0)).chunks
    second = await stack.ingest(ds.id, "faq-v2.md", "# FAQ\n\nThe warehouse closes at midnight.\n\nParking is free.",
                                document_id=first.id)
    assert second.id == first.id and second.status == DONE and second.name == "faq-v2.md"
    assert (await stack.search("office nine", [ds.id], keywords_similarity_weight=1.0)).chunks == []
    hits = (await stack.search("warehouse midnight", [ds.id])).chunks
    assert hits and all(h.document_id == first.id for h in hits)
    listed = (await stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id)))
    assert listed.total == 1 and listed.documents[0].chunk_count == second.chunk_count
    # A failed re-ingest says why and keeps the chunks that were there.
    broken = await stack.ingest(ds.id, "faq.pdf", b"%PDF-1.4 garbage", document_id=first.id)
    assert broken.status == FAILED and "previous" in broken.error
    assert (await stack.search("warehouse midnight", [ds.id])).chunks


async def test_tenant_isolation(stack):
    other = stack.tenant + "-other"
    mine = await stack.dataset("shared-name")
    theirs = await stack.dataset("shared-name", tenant=other)  # the same name in another tenant is fine
    await stack.ingest(mine.id, "m.txt", "Secret recipe: cinnamon and cardamom.")
    await stack.ingest(theirs.id, "t.txt", "Cinnamon rolls for everyone.", tenant=other)
    assert [d.id for d in (await stack.stub.ListDatasets(rr_pb.ListDatasetsRequest(tenant_id=other))).datasets] == [theirs.id]
    hits = (await stack.search("cinnamon", [theirs.id], tenant=other)).chunks
    assert [h.dataset_id for h in hits] == [theirs.id] and "Secret" not in hits[0].content
    for call in (stack.search("cinnamon", [mine.id], tenant=other),
                 stack.ingest(mine.id, "x.txt", "intrusion", tenant=other),
                 stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=other, dataset_id=mine.id)),
                 stack.stub.DeleteDataset(rr_pb.DeleteDatasetRequest(tenant_id=other, dataset_id=mine.id))):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await stack.search("cinnamon", [mine.id])).chunks[0].content.startswith("Secret")


async def test_persistence_across_restart(stack):
    ds = await stack.dataset()
    doc = await stack.ingest(ds.id, "kept.md", "# Archive\n\nThe archive keeps letters from 1850.")
    before = (await stack.search("archive letters", [ds.id])).chunks
    await stack.restart()
    after = (await stack.search("archive letters", [ds.id])).chunks
    assert [(c.id, c.content) for c in after] == [(c.id, c.content) for c in before] and after[0].document_id == doc.id
    assert after[0].similarity == pytest.approx(before[0].similarity, abs=1e-5)
    listed = await stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds.id))
    assert listed.documents[0].status == DONE
    more = await stack.ingest(ds.id, "new.txt", "Letters were sealed with wax.")  # and it still takes writes
    assert {c.document_id for c in (await stack.search("letters", [ds.id])).chunks} == {doc.id, more.id}


async def test_rerank_through_llm_gateway(stack):
    ds = await stack.dataset()
    await stack.ingest(ds.id, "a.txt", "Sailing boats need wind.")
    await stack.ingest(ds.id, "b.txt", "Rowing boats need oars and strong arms.")
    res = await stack.search("boats oars", [ds.id], rerank_model="overlap@Scripted", keywords_similarity_weight=0.3)
    top = res.chunks[0]
    assert "oars" in top.content
    # RAGFlow's rerank_by_model: the model's score takes the vector side (overlap: 2 of 2 query words).
    assert top.vector_similarity == pytest.approx(1.0)
    assert top.similarity == pytest.approx(0.3 * top.term_similarity + 0.7 * 1.0, abs=1e-5)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.search("boats", [ds.id], rerank_model="missing@Nowhere")
    assert "rerank" in err.value.details()


async def test_bad_requests_get_clear_errors(stack):
    ds = await stack.dataset()
    cases = [
        (stack.stub.CreateDataset(rr_pb.CreateDatasetRequest(name="x")), grpc.StatusCode.INVALID_ARGUMENT, "tenant_id"),
        (stack.dataset(""), grpc.StatusCode.INVALID_ARGUMENT, "name"),
        (stack.dataset("kb"), grpc.StatusCode.ALREADY_EXISTS, "already exists"),
        (stack.dataset("tiny-chunks", size=4), grpc.StatusCode.INVALID_ARGUMENT, "chunk_size"),
        (stack.ingest(ds.id, "a.txt", "x", metadata="[1]"), grpc.StatusCode.INVALID_ARGUMENT, "metadata_json"),
        (stack.ingest("0" * 32, "a.txt", "x"), grpc.StatusCode.NOT_FOUND, "dataset"),
        (stack.ingest(ds.id, "a.txt", "x", document_id="f" * 32), grpc.StatusCode.NOT_FOUND, "document"),
        (stack.search("q", []), grpc.StatusCode.INVALID_ARGUMENT, "dataset_ids"),
        (stack.search("q", [ds.id], keywords_similarity_weight=1.5), grpc.StatusCode.INVALID_ARGUMENT, "keywords_similarity_weight"),
    ]
    for call, code, word in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == code and word in err.value.details(), err.value.details()
