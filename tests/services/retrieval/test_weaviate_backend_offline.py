"""The Weaviate backend as installed by `make`: its client imports beside our grpcio/protobuf, and a
Weaviate that cannot be reached is one clear error naming it (the full contract suite needs a server:
it runs when TRELLIS_WEAVIATE_URL is set)."""

from __future__ import annotations

import pytest

from services.common.errors import Unavailable
from services.retrieval.backends.weaviate import WeaviateBackend
from tests.support.net import free_port


async def test_unreachable_weaviate_is_a_clear_unavailable_error():
    import weaviate  # noqa: F401  (installed by make with --no-deps: it must import with our pins)

    url = f"http://127.0.0.1:{free_port()}"
    backend = WeaviateBackend(url, grpc_port=free_port())
    with pytest.raises(Unavailable, match=f"cannot reach Weaviate at {url}"):
        await backend.open()
    await backend.aclose()
