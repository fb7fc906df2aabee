"""Deltas that arrive together travel together through provider -> gateway -> client, and nothing changes:
the text, each tool call's id, name and arguments, and their order (services/common/coalesce.py)."""

from __future__ import annotations

from services.clients import LlmClient
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
