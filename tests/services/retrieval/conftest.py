from __future__ import annotations

import pytest

from tests.support.retrieval import BACKENDS, NO_WEAVIATE, WEAVIATE_URL, embedding_gateway, running_stack


@pytest.fixture
async def llm_addr():
    async with embedding_gateway() as addr:
        yield addr


@pytest.fixture(params=BACKENDS)
async def stack(request, tmp_path, llm_addr):
    """The retrieval service over each backend. Weaviate needs a server: without TRELLIS_WEAVIATE_URL its
    parameter is skipped with a reason that says so (no server can exist on this machine)."""
    if request.param == "weaviate" and not WEAVIATE_URL:
        pytest.skip(NO_WEAVIATE)
    async with running_stack(request.param, tmp_path, llm_addr) as s:
        yield s
