"""The scripted provider through the real gRPC server, driven with LlmClient as the orchestrator will."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from services.common.errors import InvalidArgument, ServiceError
from services.clients import LlmClient
from services.llm_gateway.providers.scripted import ScriptBook
from services.clients.llm_convert import delta_from_proto
from services.llm_gateway.models import ForceTool, Message, Tool, ToolCall, assemble
from trellis.llm.v1 import llm_service_pb2 as llm_pb
from tests.support.llm_gateway import llm_gateway, user

SCRIPTS = {
    "chat": {
        "researcher": {
            "turns": [
                {"tool_calls": [{"name": "web_search", "arguments": {"query": "trellis grpc"}},
                                {"name": "calc", "arguments": {"expr": "6*7"}, "id": "call_b"}]},
                {"reply": "Found: {last_tool}"},
            ],
            "rules": [{"when": {"last_role": "tool", "contains": "error"}, "reply": "The tool failed ({turn})."}],
        },
        "echo": ["{last_user}"],
        "slow": [{"reply": "late", "delay_s": 1.0}],
        "flaky": [{"error": {"code": "UNAVAILABLE", "message": "scripted outage", "times": 1}, "reply": "recovered"}],
        "broken": [{"error": {"code": "INVALID_ARGUMENT", "message": "context too long"}}],
        "chunky": [{"reply": "abcdefgh", "chunk_chars": 3, "chunk_delay_s": 0.01}],
        "picky": {"rules": [{"when": {"tool_choice": "lookup"}, "reply": "forced"},
                            {"when": {"system_contains": "pirate"}, "reply": "arr"}]},
    },
    "embedding": {"bow": {"dimension": 16}},
    "rerank": {"overlap": {}},
}


@pytest.fixture
async def client():
    async with llm_gateway(SCRIPTS) as gw:
        llm = LlmClient(gw.channel)
        llm.gateway = gw.gateway  # type: ignore[attr-defined]
        yield llm


async def test_turns_follow_the_conversation(client: LlmClient):
    question = [Message("user", "research trellis")]
    first = await client.chat("researcher@Scripted", question, tools=[Tool("web_search"), Tool("calc")])
    assert first.finish_reason == "tool_calls" and first.model == "researcher@Scripted"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("call_0_0", "web_search", {"query": "trellis grpc"}), ("call_b", "calc", {"expr": "6*7"})]
    history = [*question, Message("assistant", tool_calls=first.tool_calls),
               Message("tool", "gRPC services", tool_call_id="call_0_0"), Message("tool", "42", tool_call_id="call_b")]
    second = await client.chat("researcher@Scripted", history)
    assert second.content == "Found: 42" and second.finish_reason == "stop" and second.usage.completion_tokens > 0
    third = await client.chat("researcher", [*history, Message("assistant", "x"), Message("user", "more")])
    assert third.content == "Found: 42"  # past the last turn, the last step repeats


async def test_rules_win_over_turns(client: LlmClient):
    history = [Message("user", "q"), Message("assistant", tool_calls=(ToolCall("c", "web_search", "{}"),)),
               Message("tool", "error: timeout", tool_call_id="c")]
    result = await client.chat("researcher@Scripted", history)
    assert result.content == "The tool failed (1)."
    assert (await client.chat("picky@Scripted", [Message("user", "x")], tools=[Tool("lookup")],
                              tool_choice=ForceTool("lookup"))).content == "forced"
    assert (await client.chat("picky@Scripted", [Message("system", "Talk like a Pirate"), Message("user", "x")])).content == "arr"
    with pytest.raises(ServiceError) as err:
        await client.chat("picky@Scripted", [Message("user", "x")])
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION and "no step" in err.value.message


async def test_text_streams_in_chunks_and_calls_are_recorded(client: LlmClient):
    pieces = [d.content async for d in client.stream_chat("chunky@Scripted", [Message("user", "go")]) if d.content]
    assert pieces == ["abc", "def", "gh"]
    assert (await client.chat("echo@Scripted", [Message("user", "hello there")])).content == "hello there"
    calls = client.gateway.scripted().calls  # type: ignore[attr-defined]
    assert [name for name, _ in calls] == ["chunky", "echo"]
    assert calls[1][1].messages[-1].content == "hello there"


async def test_complete_sends_the_streamed_turn_in_one_message():
    """Complete is Chat's turn whole: the same content, each tool call assembled with its id, name and whole
    arguments, the finish reason, usage and model, in one response."""
    async with llm_gateway(SCRIPTS) as gw:
        sent = {}
        for model in ("chunky@Scripted", "researcher@Scripted"):
            req = llm_pb.ChatRequest(model_id=model, messages=[user("go")])
            chunks = await gw.chat(req)
            whole = await gw.stub.Complete(req, timeout=5)
            streamed = assemble([delta_from_proto(c) for c in chunks], chunks[0].model)
            assert assemble([delta_from_proto(whole)], whole.model) == streamed
            assert whole.usage.completion_tokens == chunks[-1].usage.completion_tokens > 0
            sent[model] = len(chunks)
        assert sent["chunky@Scripted"] == 3  # "abc", "def" and "gh" with the finish, where Complete sends one message
        assert [(t.id, t.name) for t in whole.tool_call_deltas] == [("call_0_0", "web_search"), ("call_b", "calc")]
        assert json.loads(whole.tool_call_deltas[0].arguments_delta) == {"query": "trellis grpc"}


async def test_delays_overlap_when_requests_run_concurrently(client: LlmClient):
    calls = client.gateway.scripted().calls  # type: ignore[attr-defined]
    tasks = [asyncio.create_task(client.chat("slow@Scripted", [Message("user", str(i))])) for i in range(3)]
    while len(calls) < 3:  # every request is inside its delay at once: nothing serialises them
        await asyncio.sleep(0.01)
    assert not any(t.done() for t in tasks)
    assert [r.content for r in await asyncio.gather(*tasks)] == ["late"] * 3


async def test_scripted_errors_retry_like_provider_errors(client: LlmClient):
    assert (await client.chat("flaky@Scripted", [Message("user", "x")])).content == "recovered"  # retried once
    with pytest.raises(ServiceError) as err:
        await client.chat("broken@Scripted", [Message("user", "x")])
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "context too long" in err.value.message
    assert not err.value.retryable


async def test_embeddings_and_rerank(client: LlmClient):
    e = await client.embed(["red apples", "red apples", "blue sky"], model_id="bow@Scripted")
    assert e.dimension == 16 and e.vectors[0] == e.vectors[1] != e.vectors[2]
    ranking = await client.rerank("red apple pie", ["blue sky", "red apple"], model_id="overlap@Scripted")
    assert ranking.method == "provider" and [s.index for s in ranking.scores] == [1, 0]
    by_vectors = await client.rerank("red apples", ["blue sky", "red apples"], embedding_model_id="bow@Scripted")
    assert by_vectors.method == "embedding_similarity" and by_vectors.model == "bow@Scripted"
    assert by_vectors.scores[0].index == 1 and by_vectors.scores[0].score == pytest.approx(1.0)


async def test_unknown_models_are_not_found_and_name_the_id(client: LlmClient):
    with pytest.raises(ServiceError) as err:
        await client.chat("nobody@Scripted", [Message("user", "x")])
    assert err.value.code == grpc.StatusCode.NOT_FOUND and "'nobody@Scripted'" in err.value.message
    assert "researcher@Scripted" in err.value.message  # lists what is known
    with pytest.raises(ServiceError) as err:
        await client.chat("", [Message("user", "x")])
    assert err.value.code == grpc.StatusCode.NOT_FOUND and "TRELLIS_DEFAULT_CHAT_MODEL" in err.value.message


def test_script_book_errors_name_the_field():
    with pytest.raises(InvalidArgument) as err:
        ScriptBook.parse({"chat": {"a": {"turns": [{"reply": "x", "delay": 1}]}}})
    assert "chat.a.turns.0.delay" in err.value.message
    with pytest.raises(InvalidArgument) as err:
        ScriptBook.parse({"chat": {"a": [{"error": {"code": "OOPS"}}]}})
    assert "OOPS" in err.value.message


def test_script_book_loads_from_yaml(tmp_path):
    path = tmp_path / "scripts.yaml"
    path.write_text("chat:\n  hello:\n    - reply: hi {last_user}\n")
    book = ScriptBook.load(path)
    assert book.chat["hello"].turns[0].reply == "hi {last_user}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("chat: [unclosed")
    with pytest.raises(SystemExit) as exc:
        ScriptBook.load(bad)
    assert "TRELLIS_LLM_SCRIPTS" in str(exc.value)
