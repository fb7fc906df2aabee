"""Deltas that arrive together travel together through provider -> gateway -> client, and nothing changes:
the text, each tool call's id, name and arguments, and their order (services/common/coalesce.py)."""

from __future__ import annotations

from services.clients import LlmClient
from services.common.speed_policies import StreamPacing
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.models import Message, ToolCall
from tests.support.fake_openai import Reply, chunk, tool_delta, usage_chunk
from tests.support.llm_gateway import llm_gateway

ARGS = '{"city": "Paris", "days": [1, 2, 3], "note": "a \\"quoted\\" word"}'


async def test_text_and_split_tool_calls_arrive_merged_and_exact(fake_openai):
    pieces = [ARGS[i:i + 3] for i in range(0, len(ARGS), 3)]
    sent = [chunk(role="assistant", content="")]
    sent += [chunk(w) for w in ("Let", " me", " look", " that", " up.")]
    sent.append(chunk(tool_calls=[tool_delta(0, id="call_a", name="weather", arguments="")]))
    sent += [chunk(tool_calls=[tool_delta(0, arguments=p)]) for p in pieces]
    sent.append(chunk(tool_calls=[tool_delta(1, id="call_b", name="clock", arguments='{"tz": "CET"}')]))
    sent += [chunk(finish_reason="tool_calls"), usage_chunk(9, 30)]
    fake_openai.chat(Reply.stream(sent))  # unpaced: the chunks reach the gateway together
    cfg = LlmGatewayConfig.for_tests(openai_base_url=fake_openai.base_url, openai_api_key="sk-test")
    async with llm_gateway(config=cfg) as gw:
        client = LlmClient(gw.channel)
        deltas = [d async for d in client.stream_chat("gpt-test", [Message("user", "weather?")], timeout=30)]
        fake_openai.chat(Reply.stream(sent))
        result = await client.chat("gpt-test", [Message("user", "weather?")], timeout=30)
    assert len(deltas) < len(sent)
    assert "".join(d.content for d in deltas) == "Let me look that up."
    assert result.content == "Let me look that up."
    assert result.tool_calls == (ToolCall("call_a", "weather", ARGS), ToolCall("call_b", "clock", '{"tz": "CET"}'))
    assert result.finish_reason == "tool_calls" and (result.usage.prompt_tokens, result.usage.completion_tokens) == (9, 30)
    # text never comes after a tool call of the same turn
    first_call = next(i for i, d in enumerate(deltas) if d.tool_calls)
    assert not any(d.content for d in deltas[first_call + 1:])


async def paced_stream(fake_openai, **config) -> list:
    """A stream of 20 words 10 ms apart, read through the gateway by a client that keeps up."""
    words = [f" w{i}" for i in range(20)]
    fake_openai.chat(Reply.stream([chunk(w) for w in words] + [chunk(finish_reason="stop")], delay_s=0.01))
    cfg = LlmGatewayConfig.for_tests(openai_base_url=fake_openai.base_url, openai_api_key="sk-test", **config)
    async with llm_gateway(config=cfg) as gw:
        client = LlmClient(gw.channel)
        deltas = [d async for d in client.stream_chat("gpt-test", [Message("user", "go")], timeout=30)]
    assert "".join(d.content for d in deltas) == "".join(words)
    return deltas


async def test_a_busy_gateway_lingers_between_chunks_but_not_before_the_first_or_after_the_last(fake_openai):
    # busy from the first stream on, with a linger longer than the stream: the first chunk goes at once, the
    # rest when the provider's stream ends
    deltas = await paced_stream(fake_openai, stream_pacing=StreamPacing("test", busy_streams=1, linger_s=3600))
    assert deltas[0].content == " w0"
    assert len(deltas) <= 3  # the first, the rest of the text, the finish (a finished delta never merges)
    assert deltas[-1].finish_reason == "stop"


async def test_a_gateway_with_few_streams_sends_each_chunk_as_it_comes(fake_openai):
    deltas = await paced_stream(fake_openai)  # the default: lingers only from 16 streams at once
    assert len(deltas) > 10
