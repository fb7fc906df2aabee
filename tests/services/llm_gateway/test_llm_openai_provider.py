"""The openai provider against a local OpenAI-compatible server, through the real gRPC server."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from aiohttp.client_proto import ResponseHandler
from prometheus_client import REGISTRY
from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.clients.llm_models import merge_deltas
from services.common.coalesce import Linger, coalesce
from services.common.speed_policies import StreamPacing
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.models import ChatCall, Message
from services.llm_gateway.providers import ModelSpec
from services.llm_gateway.providers.openai import OpenAIProvider, OpenAISettings
from services.llm_gateway.providers_file import ProvidersFile
from tests.support.fake_openai import Reply, chunk, completion, text_chunks, tool_delta, usage_chunk
from tests.support.llm_gateway import llm_gateway, text_of, tool_calls_of, user
from tests.support.timers import timers_armed


def _cfg(base_url: str, **overrides) -> LlmGatewayConfig:
    return LlmGatewayConfig.for_tests(openai_base_url=base_url, openai_api_key="sk-test", **overrides)


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_streams_text_usage_and_the_resolved_model(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks("Hello there world", usage=(7, 3))))
    tokens_in = _metric("trellis_llm_tokens_total", provider="OpenAI", model="gpt-test", direction="in")
    ttft = _metric("trellis_llm_time_to_first_token_seconds_count", provider="OpenAI", model="gpt-test")
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        chunks = await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert text_of(chunks) == "Hello there world"
    # Streamed (body["stream"] below); chunks that arrive together may travel as one (services/common/coalesce.py).
    assert 1 <= len([c for c in chunks if c.content_delta]) <= 3
    assert chunks[0].model == "gpt-test@OpenAI"
    assert chunks[-1].finish_reason == chat_pb.FINISH_REASON_STOP
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens, chunks[-1].usage.total_tokens) == (7, 3, 10)
    body = fake_openai.chat_requests()[0]
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert _metric("trellis_llm_tokens_total", provider="OpenAI", model="gpt-test", direction="in") == tokens_in + 7
    assert _metric("trellis_llm_time_to_first_token_seconds_count", provider="OpenAI", model="gpt-test") == ttft + 1


async def test_streams_one_after_another_reuse_one_connection_to_the_provider(fake_openai):
    """The server sends the body's end a moment after `[DONE]`, as real servers may: the provider still reads to
    the end, so the next turn reuses the connection (with a remote provider, a new one is a TLS handshake)."""
    for text in ("one two", "three four", "five six"):
        fake_openai.chat(Reply.stream(text_chunks(text), end_delay_s=0.05))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        texts = [text_of(await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))) for _ in range(3)]
    assert texts == ["one two", "three four", "five six"]
    assert len(set(fake_openai.peers)) == 1


async def test_a_server_that_never_ends_the_body_after_done_still_ends_the_turn(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks("still here"), end_delay_s=3600), Reply.stream(text_chunks("next")))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        first = await asyncio.wait_for(gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")])), 30)
        second = await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert (text_of(first), text_of(second)) == ("still here", "next")
    assert first[-1].finish_reason == chat_pb.FINISH_REASON_STOP
    assert fake_openai.peers[0] != fake_openai.peers[1]  # that connection was dropped, not reused


async def test_while_the_gateway_lingers_the_provider_reads_what_arrived_meanwhile_at_once(fake_openai):
    """A busy gateway sends a stream's next message only after a pause (coalesce.Linger; an hour here). The
    provider then does not read and parse each chunk as it comes: it takes what arrived during the pause in one
    read, and the body's end cuts the pause short, so the stream does not wait an hour."""
    words = [f"w{i}" for i in range(20)]
    fake_openai.chat(Reply.stream(text_chunks(" ".join(words)), delay_s=0.01))
    provider = OpenAIProvider("OpenAI", base_url=fake_openai.base_url, api_key="sk-test")
    read: list[str] = []  # what the provider handed on, one entry per delta

    async def counted():
        async for delta in provider.stream(ChatCall("gpt-test", (Message("user", "hi"),)), timeout=30):
            read.append(delta.content)
            yield delta

    try:
        async with asyncio.timeout(120):  # far less than the pause
            sent = [d async for d in coalesce(counted(), merge_deltas, linger=Linger(StreamPacing("test", busy_streams=1, linger_s=3600)))]
    finally:
        await provider.aclose()
    assert "".join(d.content for d in sent) == " ".join(words)
    # The first chunk at once, the one already being read when the pause began, then the rest in one read
    # with the finish; one delta per chunk (23 of them) without the pause.
    assert len(read) <= 4, read
    assert sent[-1].finish_reason == "stop" and sent[-1].usage is not None


async def test_a_stream_arms_no_timer_per_chunk(fake_openai):
    """The gateway bounds each wait for a delta with one timer per stream (robust.py); the provider's HTTP read
    adds none per chunk (aiohttp's read timeout would re-arm one for every chunk the provider sends)."""
    words = [f"w{i}" for i in range(60)]
    fake_openai.chat(Reply.stream(text_chunks(" ".join(words)), delay_s=0.002))  # chunk by chunk, apart
    provider = OpenAIProvider("OpenAI", base_url=fake_openai.base_url, api_key="sk-test")
    try:
        with timers_armed() as armed:
            deltas = [d async for d in provider.stream(ChatCall("gpt-test", (Message("user", "hi"),)), timeout=30)]
    finally:
        await provider.aclose()
    assert "".join(d.content for d in deltas) == " ".join(words)
    assert len(deltas) > 30  # read as they came
    # (the fake server runs on this loop too: its pacing arms a timer per chunk)
    reads = [cb for cb in armed.callbacks if isinstance(getattr(cb, "__self__", None), ResponseHandler)]
    assert armed.count > len(deltas) and reads == []


async def test_non_streaming_endpoint_answers_in_one_chunk(fake_openai):
    providers = ProvidersFile(factories={"Batch": OpenAISettings(base_url=fake_openai.base_url, stream=False)})
    fake_openai.chat(Reply.json(completion("All at once.", usage=(4, 3))))
    async with llm_gateway(providers=providers) as gw:
        chunks = await gw.chat(llm_pb.ChatRequest(model_id="whole@Batch", messages=[user("hi")]))
    assert [c.content_delta for c in chunks] == ["All at once."]
    assert chunks[0].finish_reason == chat_pb.FINISH_REASON_STOP and chunks[0].usage.total_tokens == 7
    assert "stream" not in fake_openai.chat_requests()[0] or fake_openai.chat_requests()[0]["stream"] is False


async def test_tool_call_deltas_split_across_chunks_are_assembled(fake_openai):
    # Two calls interleaved, arguments cut mid-string, and a server that repeats id and name (as some do).
    fake_openai.chat(Reply.stream([
        chunk(role="assistant", content=None),
        chunk(tool_calls=[tool_delta(0, id="call_a", name="get_weather", arguments="")]),
        chunk(tool_calls=[tool_delta(0, arguments='{"ci')]),
        chunk(tool_calls=[tool_delta(1, id="call_b", name="get_time", arguments='{"tz":')]),
        chunk(tool_calls=[tool_delta(0, id="call_a", name="get_weather", arguments='ty": "Pa')]),
        chunk(tool_calls=[tool_delta(0, arguments='ris"}')]),
        chunk(tool_calls=[tool_delta(1, arguments=' "CET"}')]),
        chunk(finish_reason="tool_calls"),
        usage_chunk(20, 12),
    ]))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        chunks = await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("weather and time?")]))
    calls = tool_calls_of(chunks)
    assert calls == [("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_time", '{"tz": "CET"}')]
    assert json.loads(calls[0][2]) == {"city": "Paris"}
    names = [d.name for c in chunks for d in c.tool_call_deltas if d.name]
    assert names == ["get_weather", "get_time"]  # passed on once per call, not on every repeat
    assert chunks[-1].finish_reason == chat_pb.FINISH_REASON_TOOL_CALLS


async def test_request_fields_reach_the_provider(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks('{"answer": 4}')))
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    req = llm_pb.ChatRequest(
        model_id="gpt-test@OpenAI",
        messages=[
            chat_pb.ChatMessage(role=chat_pb.ROLE_SYSTEM, content="be brief"),
            user("2+2?"),
            chat_pb.ChatMessage(role=chat_pb.ROLE_ASSISTANT, tool_calls=[
                chat_pb.ToolCall(id="c1", name="calc", arguments_json='{"expr": "2+2"}')]),
            chat_pb.ChatMessage(role=chat_pb.ROLE_TOOL, tool_call_id="c1", content="4"),
        ],
        tools=[chat_pb.Tool(name="calc", description="evaluate", parameters_json=json.dumps(
            {"type": "object", "properties": {"expr": {"type": "string"}}}))],
        tool_choice=chat_pb.ToolChoice(function_name="calc"),
        response_format=chat_pb.ResponseFormat(type=chat_pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
                                               json_schema=json.dumps(schema), schema_name="result", strict=True),
        sampling=chat_pb.SamplingParams(temperature=0.0, top_p=0.5),
        max_tokens=64,
        stop=["\n\n"],
    )
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        await gw.chat(req)
    body = fake_openai.chat_requests()[0]
    assert body["messages"][2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+2"}'}}]}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "4"}
    assert body["tools"][0]["function"]["name"] == "calc"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "calc"}}
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "result", "schema": schema, "strict": True}}
    assert body["temperature"] == 0.0 and body["top_p"] == 0.5  # temperature 0 is sent: it was set
    assert "presence_penalty" not in body  # unset: the provider's default applies
    assert body["max_tokens"] == 64 and body["stop"] == ["\n\n"]


async def test_rate_limit_then_success_is_retried(fake_openai):
    fake_openai.chat(Reply.error(429, "Rate limit reached for gpt-test", headers={"retry-after-ms": "20"}),
                     Reply.stream(text_chunks("ok")))
    retries = _metric("trellis_llm_retries_total", provider="OpenAI", model="gpt-test", op="chat")
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        chunks = await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert text_of(chunks) == "ok"
    assert len(fake_openai.chat_requests()) == 2
    assert _metric("trellis_llm_retries_total", provider="OpenAI", model="gpt-test", op="chat") == retries + 1


async def test_bad_request_is_not_retried_and_keeps_the_provider_message(fake_openai):
    fake_openai.chat(Reply.error(400, "max_tokens is too large: 999999"), Reply.stream(text_chunks("never")))
    errors = _metric("trellis_llm_errors_total", provider="OpenAI", model="gpt-test", op="chat", code="INVALID_ARGUMENT")
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_tokens is too large: 999999" in err.value.details() and "OpenAI gpt-test" in err.value.details()
    assert len(fake_openai.chat_requests()) == 1
    assert _metric("trellis_llm_errors_total", provider="OpenAI", model="gpt-test", op="chat", code="INVALID_ARGUMENT") == errors + 1


async def test_server_errors_are_retried_until_attempts_run_out(fake_openai):
    fake_openai.chat(*[Reply.error(503, "upstream overloaded") for _ in range(3)], Reply.stream(text_chunks("late")))
    async with llm_gateway(config=_cfg(fake_openai.base_url, max_attempts=3)) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "upstream overloaded" in err.value.details()
    assert len(fake_openai.chat_requests()) == 3


async def test_auth_failure_is_unauthenticated(fake_openai):
    fake_openai.chat(Reply.error(401, "Incorrect API key provided"))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Incorrect API key provided" in err.value.details()


async def test_unreachable_provider_is_unavailable():
    # A port nothing listens on: connection refused, retried, then UNAVAILABLE naming the provider.
    from tests.support.net import free_port

    async with llm_gateway(config=_cfg(f"http://127.0.0.1:{free_port()}/v1", max_attempts=2)) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "cannot reach the provider" in err.value.details()


async def test_error_event_inside_a_stream_reaches_the_client(fake_openai):
    fake_openai.chat(Reply.stream([chunk("partial"), {"error": {"message": "model overloaded mid-stream"}}]))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        received = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for c in gw.stub.Chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]), timeout=10):
                received.append(c)
    assert text_of(received) == "partial"
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "model overloaded mid-stream" in err.value.details()
    assert len(fake_openai.chat_requests()) == 1  # text already reached the client: no retry


async def test_stalled_stream_hits_the_deadline_and_closes_upstream(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks("one two three"), stall_after=2))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        received = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            # The stream stalls for good: the deadline only has to leave time for the first chunk, on any machine.
            async for c in gw.stub.Chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]), timeout=3.0):
                received.append(c)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert text_of(received) == "one"
        await asyncio.wait_for(fake_openai.disconnected.wait(), 30)  # a leak hangs


async def test_stalled_stream_without_a_client_deadline_fails_on_the_idle_limit(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks("one two"), stall_after=2))
    async with llm_gateway(config=_cfg(fake_openai.base_url, stream_idle_s=0.5)) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]), timeout=30)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "stalled" in err.value.details() and "OpenAI gpt-test" in err.value.details()
        await asyncio.wait_for(fake_openai.disconnected.wait(), 30)  # a leak hangs


async def test_client_cancel_closes_the_upstream_request(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks("first second third"), stall_after=2))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        call = gw.stub.Chat(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]), timeout=30)
        first = await call.read()
        assert first.content_delta == "first"
        assert not fake_openai.disconnected.is_set()
        call.cancel()
        await asyncio.wait_for(fake_openai.disconnected.wait(), 30)  # a leak hangs
    assert fake_openai.completed_streams == 0


async def test_a_cancelled_complete_call_closes_the_upstream_request(fake_openai):
    fake_openai.chat(Reply.stream(text_chunks("first second third"), stall_after=2))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        call = gw.stub.Complete(llm_pb.ChatRequest(model_id="gpt-test", messages=[user("hi")]), timeout=30)
        while not fake_openai.requests:  # the upstream stream is open and stalled after two chunks
            await asyncio.sleep(0.01)
        assert not fake_openai.disconnected.is_set()
        call.cancel()
        await asyncio.wait_for(fake_openai.disconnected.wait(), 30)  # a leak hangs
    assert fake_openai.completed_streams == 0


async def test_embeddings_through_the_endpoint(fake_openai):
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        resp = await gw.stub.Embed(llm_pb.EmbedRequest(model_id="text-embedding-test", texts=["aa", "eee e"]), timeout=10)
    assert resp.model == "text-embedding-test@OpenAI" and resp.dimension == 8
    assert list(resp.embeddings[0].values)[:2] == [2.0, 0.0] and list(resp.embeddings[1].values)[:2] == [0.0, 4.0]
    assert resp.usage.prompt_tokens == 3
    assert fake_openai.requests[0] == ("/v1/embeddings", {"model": "text-embedding-test", "input": ["aa", "eee e"],
                                                          "encoding_format": "float"})


async def test_rerank_by_the_provider_or_by_similarity_and_says_which(fake_openai):
    providers = ProvidersFile(
        default_embedding_model="emb@Fake",
        factories={"Fake": OpenAISettings(base_url=fake_openai.base_url, models={
            "bge-reranker": ModelSpec(type="rerank", model="BAAI/bge-reranker-v2-m3"),
            "emb": ModelSpec(type="embedding"),
        })},
    )
    docs = ["cats purr", "dogs bark loudly", "the dog sleeps"]
    async with llm_gateway(providers=providers) as gw:
        by_provider = await gw.stub.Rerank(
            llm_pb.RerankRequest(model_id="bge-reranker@Fake", query="dogs bark", documents=docs, top_n=2), timeout=10)
        by_similarity = await gw.stub.Rerank(llm_pb.RerankRequest(query="aaaa", documents=["ab", "aaaa", "xyz"]), timeout=10)
    assert by_provider.method == llm_pb.RERANK_METHOD_PROVIDER and by_provider.model == "bge-reranker@Fake"
    assert [r.index for r in by_provider.results] == [1, 0]
    assert fake_openai.requests[0][0] == "/v1/rerank" and fake_openai.requests[0][1]["model"] == "BAAI/bge-reranker-v2-m3"
    assert by_similarity.method == llm_pb.RERANK_METHOD_EMBEDDING_SIMILARITY and by_similarity.model == "emb@Fake"
    assert [r.index for r in by_similarity.results] == [1, 0, 2]
    assert by_similarity.results[0].relevance_score == pytest.approx(1.0)


async def test_llm_client_breaking_out_of_a_stream_cancels_upstream(fake_openai):
    from services.common.errors import ServiceError
    from services.clients import LlmClient
    from services.llm_gateway.models import Message

    fake_openai.chat(Reply.stream(text_chunks("alpha beta gamma"), stall_after=3),
                     Reply.error(429, "Too many requests"), Reply.error(429, "Too many requests"),
                     Reply.error(429, "Too many requests"))
    async with llm_gateway(config=_cfg(fake_openai.base_url)) as gw:
        client = LlmClient(gw.channel)
        async for delta in client.stream_chat("gpt-test", [Message("user", "hi")], timeout=30):
            assert delta.content in ("alpha", "alpha beta")  # the two chunks sent at once may come merged
            break
        await asyncio.wait_for(fake_openai.disconnected.wait(), 30)  # a leak hangs
        with pytest.raises(ServiceError) as err:
            await client.chat("gpt-test", [Message("user", "hi")], timeout=30)
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and err.value.retryable
    assert "Too many requests" in err.value.message
