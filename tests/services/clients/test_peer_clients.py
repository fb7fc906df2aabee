"""The peer clients (services/clients/) against real services on 127.0.0.1: typed results, typed errors, and
the retry rule: a call made after its peer restarted on the same address succeeds; an UNAVAILABLE the
peer answered itself is not asked again."""

from __future__ import annotations

import grpc
import pytest
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.clients import MetadataCondition, RetrievalClient, RetryPolicy, SandboxClient
from services.clients.llm_models import Message
from services.common.errors import InvalidArgument, NotFound, Unavailable
from services.sandbox.config import SandboxConfig
from tests.support.llm_gateway import llm_gateway, user
from tests.support.sandbox import COMPONENT_LIMITS, sandbox_server, sandbox_servicer

DOWN = {"chat": {"down": [{"error": {"code": "UNAVAILABLE", "message": "scripted outage", "times": 1000}}],
                 "hello": ["Hello there."]}}
SHORT = RetryPolicy(budget_s=0.5)  # a client whose calls to a peer that stays down fail soon (the default waits 20 s)


async def test_retrieval_search_and_find_dataset_are_typed(retrieval):
    ds = await retrieval.dataset("manuals")
    await retrieval.ingest(ds.id, "boiler.md", "Boilers need a yearly service.", metadata='{"team": "ops"}')
    client = RetrievalClient.connect(f"127.0.0.1:{retrieval.port}")
    try:
        assert (await client.find_dataset(retrieval.tenant, "manuals")).id == ds.id
        assert await client.find_dataset(retrieval.tenant, "nothing-by-this-name") is None
        [hit] = await client.search(retrieval.tenant, "boiler service", [ds.id], keywords_similarity_weight=0.5)
        assert (hit.document_name, hit.dataset_id, hit.metadata) == ("boiler.md", ds.id, {"team": "ops"})
        assert "yearly" in hit.content and hit.similarity > 0
        kept = await client.search(retrieval.tenant, "boiler", [ds.id], metadata_filter=[MetadataCondition("team", "=", "hr")])
        assert kept == []
        with pytest.raises(NotFound):
            await client.search(retrieval.tenant, "boiler", ["f" * 32])
        with pytest.raises(InvalidArgument):
            await client.search(retrieval.tenant, "boiler", [ds.id], metadata_filter=[MetadataCondition("team", "~~", "x")])
    finally:
        await client.close()


async def test_a_retrieval_call_after_the_service_restarted_on_the_same_address_succeeds(retrieval):
    ds = await retrieval.dataset("kb")
    await retrieval.ingest(ds.id, "a.txt", "Snapshots are kept for fourteen days.")
    client = RetrievalClient.connect(f"127.0.0.1:{retrieval.port}")
    impatient = RetrievalClient.connect(f"127.0.0.1:{retrieval.port}", retry=SHORT)
    port = retrieval.port
    try:
        assert len(await client.search(retrieval.tenant, "snapshots", [ds.id])) == 1
        await retrieval.stop()
        await retrieval.start(port=port)  # restarted while the client was idle
        assert len(await client.search(retrieval.tenant, "snapshots", [ds.id])) == 1
        await retrieval.stop()
        with pytest.raises(Unavailable, match="the retrieval service is unavailable"):  # a call while it stays down
            await impatient.search(retrieval.tenant, "snapshots", [ds.id])
        await retrieval.start(port=port)
        assert retrieval.port == port
        assert len(await client.search(retrieval.tenant, "snapshots", [ds.id])) == 1
    finally:
        await client.close()
        await impatient.close()


async def test_a_sandbox_call_after_the_service_restarted_on_the_same_address_succeeds():
    cfg = SandboxConfig.for_tests(defaults=COMPONENT_LIMITS)
    async with sandbox_server(await sandbox_servicer(cfg)) as sandbox:
        client = SandboxClient.connect(sandbox.addr)
        impatient = SandboxClient.connect(sandbox.addr, retry=SHORT)
        try:
            run = await client.execute("python", "def main(x):\n    print('hi')\n    return x * 2", {"x": 21}, timeout_s=30)
            assert (run.ok, run.value, run.stdout) == (True, 42, "hi\n")
            await sandbox.stop()
            with pytest.raises(Unavailable, match="the sandbox is unavailable"):  # a call while it stays down
                await impatient.execute("python", "def main():\n    return 1", {}, timeout_s=30)
            await sandbox.start(await sandbox_servicer(cfg))
            run = await client.execute("javascript", "function main() { return [1, 2] }", {}, timeout_s=30)
            assert (run.ok, run.value) == (True, [1, 2])
            failed = await client.execute("python", "def main():\n    return 1 / 0", {}, timeout_s=30)
            assert not failed.ok and failed.error_kind == "EXCEPTION" and "ZeroDivisionError" in failed.error_message
        finally:
            await client.close()
            await impatient.close()


async def test_an_unavailable_answered_by_the_llm_gateway_is_not_asked_again():
    async with llm_gateway(DOWN) as llm:
        with pytest.raises(Unavailable, match="scripted outage"):
            [d async for d in llm.client.stream_chat("down@Scripted", [Message("user", "x")])]
        by_client = len(llm.calls_to("down"))
        with pytest.raises(grpc.aio.AioRpcError):
            await llm.chat(llm_pb.ChatRequest(model_id="down@Scripted", messages=[user("x")]))  # the gateway's tries only
        assert by_client == len(llm.calls_to("down")) - by_client > 0
        assert (await llm.client.chat("hello@Scripted", [Message("user", "x")])).content == "Hello there."


async def test_an_llm_stream_after_the_gateway_restarted_on_the_same_address_succeeds():
    async with llm_gateway(DOWN) as llm:
        assert (await llm.client.chat("hello@Scripted", [Message("user", "x")])).content == "Hello there."
        await llm.stop()
        await llm.start()
        text = "".join([d.content async for d in llm.client.stream_chat("hello@Scripted", [Message("user", "y")])])
        assert text == "Hello there."


