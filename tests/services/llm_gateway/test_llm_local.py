"""The local provider really running: SmolLM2-135M (llama-cpp-python) and all-MiniLM-L6-v2, through gRPC.

Kept few and short (small max_tokens, temperature 0); the models load once for the module.
"""

from __future__ import annotations

import asyncio
import json
import threading

import grpc
import pytest
import pytest_asyncio
from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.errors import LocalModelBusy
from services.llm_gateway.providers.local import LocalProvider, _Worker
from tests.support.llm_gateway import RunningLlmGateway, llm_gateway, text_of, tool_calls_of, user

pytestmark = pytest.mark.asyncio(loop_scope="module")

WEATHER = chat_pb.Tool(
    name="get_weather",
    description="Get the current weather for a city",
    parameters_json=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
)
GREEDY = chat_pb.SamplingParams(temperature=0.0)
# A deadline only against a hang: a turn takes a second on an idle machine, much longer on a loaded one.
CALL_S = 100

# all-MiniLM-L6-v2 as sentence-transformers (torch) computes it: first six values of each vector.
REFERENCE = {
    "Hello world": [-0.034477, 0.031023, 0.006735, 0.026109, -0.039362, -0.160302],
    "The quick brown fox jumps over the lazy dog.": [0.043934, 0.058934, 0.048178, 0.077548, 0.026744, -0.03763],
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def local():
    cfg = LlmGatewayConfig.for_tests(local_enabled=True, local_context=2048, timeout_s=CALL_S, stream_idle_s=CALL_S)
    async with llm_gateway(config=cfg) as gw:
        yield gw


async def test_streams_a_short_answer(local: RunningLlmGateway):
    chunks = await local.chat(llm_pb.ChatRequest(
        messages=[user("What is the capital of France? Answer in one sentence.")], max_tokens=12, sampling=GREEDY,
    ), timeout=CALL_S)
    assert chunks[0].model == "SmolLM2-135M-Instruct@Local"  # "" resolves to the local model
    assert len([c for c in chunks if c.content_delta]) > 1  # token by token, not one block
    assert "Paris" in text_of(chunks)
    assert chunks[-1].finish_reason in (chat_pb.FINISH_REASON_STOP, chat_pb.FINISH_REASON_LENGTH)
    assert 0 < chunks[-1].usage.completion_tokens <= 12 and chunks[-1].usage.prompt_tokens > 0


async def test_forced_tool_call_parses(local: RunningLlmGateway):
    chunks = await local.chat(llm_pb.ChatRequest(
        messages=[user("What's the weather like in Paris?")], tools=[WEATHER],
        tool_choice=chat_pb.ToolChoice(function_name="get_weather"), max_tokens=32, sampling=GREEDY,
    ), timeout=CALL_S)
    [(call_id, name, arguments)] = tool_calls_of(chunks)
    assert name == "get_weather" and call_id
    assert isinstance(json.loads(arguments)["city"], str)  # the grammar makes the arguments valid JSON
    assert chunks[-1].finish_reason == chat_pb.FINISH_REASON_TOOL_CALLS


async def test_auto_tool_choice_calls_the_tool(local: RunningLlmGateway):
    chunks = await local.chat(llm_pb.ChatRequest(
        messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_SYSTEM, content="You are a helpful assistant."),
                  user("What's the weather in Paris?")],
        tools=[WEATHER], max_tokens=32, sampling=GREEDY,
    ), timeout=CALL_S)
    calls = tool_calls_of(chunks)
    assert [c[1] for c in calls] == ["get_weather"]
    assert json.loads(calls[0][2])["city"] == "Paris"


async def test_json_schema_output_follows_the_schema(local: RunningLlmGateway):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    chunks = await local.chat(llm_pb.ChatRequest(
        messages=[user("Describe a person named Bob who is 30 years old.")], max_tokens=40, sampling=GREEDY,
        response_format=chat_pb.ResponseFormat(type=chat_pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=json.dumps(schema)),
    ), timeout=CALL_S)
    data = json.loads(text_of(chunks))
    assert isinstance(data["name"], str) and isinstance(data["age"], int)


async def test_embeddings_have_dimension_384_and_match_sentence_transformers(local: RunningLlmGateway):
    texts = list(REFERENCE)
    resp = await local.stub.Embed(llm_pb.EmbedRequest(texts=texts), timeout=CALL_S)
    assert resp.model == "all-MiniLM-L6-v2@Local" and resp.dimension == 384
    for text, emb in zip(texts, resp.embeddings):
        assert len(emb.values) == 384
        assert list(emb.values)[:6] == pytest.approx(REFERENCE[text], abs=1e-4)
        assert sum(v * v for v in emb.values) == pytest.approx(1.0, abs=1e-4)


async def test_rerank_without_a_rerank_model_uses_embedding_similarity(local: RunningLlmGateway):
    docs = ["Stock markets fell sharply today.", "My cat sleeps on the sofa all day.", "Dogs love long walks."]
    resp = await local.stub.Rerank(llm_pb.RerankRequest(query="a sleepy kitten", documents=docs), timeout=CALL_S)
    assert resp.method == llm_pb.RERANK_METHOD_EMBEDDING_SIMILARITY and resp.model == "all-MiniLM-L6-v2@Local"
    assert resp.results[0].index == 1


async def test_cancel_stops_generation_and_the_model_serves_the_next_request(local: RunningLlmGateway):
    provider = next(p for p in local.gateway.registry.providers if isinstance(p, LocalProvider))
    call = local.stub.Chat(llm_pb.ChatRequest(
        messages=[user("Write a very long story about a dragon and a knight.")], max_tokens=400, sampling=GREEDY,
    ), timeout=CALL_S)
    for _ in range(2):
        assert (await call.read()).content_delta
    prompt_tokens = provider._llm.n_tokens - 2
    call.cancel()
    for _ in range(600):  # the job ends at its next token (30 s bound a hang, not this machine's speed)
        if provider._chat._pending == 0:
            break
        await asyncio.sleep(0.05)
    assert provider._chat._pending == 0
    # Stopped near where it was cancelled, not at 400 tokens (a loaded machine may add a few before it notices).
    assert provider._llm.n_tokens - prompt_tokens < 60
    chunks = await local.chat(llm_pb.ChatRequest(messages=[user("Say hello.")], max_tokens=6, sampling=GREEDY), timeout=CALL_S)
    assert text_of(chunks)


async def test_worker_runs_one_job_at_a_time_with_a_bounded_queue():
    worker = _Worker("test", queue=1)
    release = threading.Event()
    running = worker.submit(release.wait)  # occupies the thread
    waiting = worker.submit(lambda: "second")  # the one allowed to wait
    with pytest.raises(LocalModelBusy) as err:
        worker.submit(lambda: "third")
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "busy" in err.value.message
    assert not waiting.done()  # one at a time: it waits for the first
    release.set()
    assert await asyncio.wrap_future(waiting) == "second" and running.result() is True
    assert await worker.run(lambda: "again") == "again"  # room again once they finished
    worker.shutdown()
