"""Documents stored first and parsed later (ParseDocuments, StopParsing): RAGFlow's upload-then-parse."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb


async def _stored(stack, ds_id: str, name: str, text: str) -> rr_pb.Document:
    req = rr_pb.IngestDocumentRequest(tenant_id=stack.tenant, dataset_id=ds_id, name=name, content=text.encode(),
                                      store_only=True)
    return (await stack.stub.IngestDocument(req, timeout=30)).document


async def _until(stack, ds_id: str, doc_id: str, status: int) -> rr_pb.Document:
    while True:  # the parse runs in the service's background; each poll is one round trip
        docs = (await stack.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=stack.tenant, dataset_id=ds_id))).documents
        doc = next(d for d in docs if d.id == doc_id)
        if doc.status == status:
            return doc
        assert doc.status in (rr_pb.DOCUMENT_STATUS_RUNNING, status), doc
        await asyncio.sleep(0.05)


async def test_a_stored_document_is_pending_until_parsed_then_searchable(retrieval):
    ds = await retrieval.dataset()
    doc = await _stored(retrieval, ds.id, "a.txt", "The lighthouse keeper polishes the lens.")
    assert doc.status == rr_pb.DOCUMENT_STATUS_PENDING and doc.chunk_count == 0
    assert not (await retrieval.search("lighthouse", [ds.id])).chunks
    req = rr_pb.ParseDocumentsRequest(tenant_id=retrieval.tenant, dataset_id=ds.id, document_ids=[doc.id])
    started = (await retrieval.stub.ParseDocuments(req, timeout=30)).documents
    assert [d.status for d in started] == [rr_pb.DOCUMENT_STATUS_RUNNING]
    done = await asyncio.wait_for(_until(retrieval, ds.id, doc.id, rr_pb.DOCUMENT_STATUS_DONE), 30)
    assert done.chunk_count == 1
    assert (await retrieval.search("lighthouse", [ds.id])).chunks[0].document_id == doc.id
    # Parsed again: same chunks, DONE again.
    await retrieval.stub.ParseDocuments(req, timeout=30)
    again = await asyncio.wait_for(_until(retrieval, ds.id, doc.id, rr_pb.DOCUMENT_STATUS_DONE), 30)
    assert again.chunk_count == 1
    # A finished parse is not running: nothing to stop.
    stop = rr_pb.StopParsingRequest(tenant_id=retrieval.tenant, dataset_id=ds.id, document_ids=[doc.id])
    resp = await retrieval.stub.StopParsing(stop, timeout=30)
    assert [d.id for d in resp.not_running] == [doc.id] and not resp.stopped


async def test_parse_and_stop_refuse_unknown_documents_and_empty_lists(retrieval):
    ds = await retrieval.dataset()
    doc = await _stored(retrieval, ds.id, "a.txt", "text")
    for rpc, msg in ((retrieval.stub.ParseDocuments, rr_pb.ParseDocumentsRequest),
                     (retrieval.stub.StopParsing, rr_pb.StopParsingRequest)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(msg(tenant_id=retrieval.tenant, dataset_id=ds.id, document_ids=[doc.id, "nope"]), timeout=30)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(msg(tenant_id=retrieval.tenant, dataset_id=ds.id), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "document_ids" in err.value.details()
    # Nothing was started by the refused request.
    docs = (await retrieval.stub.ListDocuments(rr_pb.ListDocumentsRequest(tenant_id=retrieval.tenant, dataset_id=ds.id))).documents
    assert [d.status for d in docs] == [rr_pb.DOCUMENT_STATUS_PENDING]
