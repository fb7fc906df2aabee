"""With the bundled local embedder (all-MiniLM-L6-v2 via llm_gateway's local provider): meaning, not words."""

from __future__ import annotations

import pytest
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from tests.support.retrieval import embedding_gateway, running_stack

LOCAL = "all-MiniLM-L6-v2@Local"


async def test_vector_search_finds_meaning_and_keywords_find_words(tmp_path):
    async with embedding_gateway(local_enabled=True) as addr, running_stack("sqlite", tmp_path, addr) as stack:
        ds = await stack.dataset(model=LOCAL)
        mechanic = await stack.ingest(ds.id, "garage.txt", "My vehicle broke down, so I took the automobile to a mechanic to fix the engine.")
        lisp = await stack.ingest(ds.id, "lisp.txt", "In Lisp, car returns the first element of a list; repair a broken list with cons.")
        await stack.ingest(ds.id, "cake.txt", "Whisk the eggs with sugar and bake the sponge for twenty minutes.")
        listed = await stack.stub.ListDatasets(rr_pb.ListDatasetsRequest(tenant_id=stack.tenant))
        assert (listed.datasets[0].embedding_model, listed.datasets[0].chunk_count) == (LOCAL, 3)
        query = "car repair"
        by_vector = (await stack.search(query, [ds.id], keywords_similarity_weight=0.0)).chunks
        by_words = (await stack.search(query, [ds.id], keywords_similarity_weight=1.0)).chunks
        assert by_vector[0].document_id == mechanic.id  # no word in common with the query
        assert by_words[0].document_id == lisp.id and by_words[0].term_similarity == pytest.approx(1.0)
        assert all(h.document_id != mechanic.id for h in by_words)  # not a single query word in it
