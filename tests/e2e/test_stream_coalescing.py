"""Tokens through every hop (model -> llm_gateway -> orchestrator -> gateway -> HTTP client): the text arrives
exactly, in every dialect, in fewer messages than tokens when the model outruns the pipeline or a busy
llm_gateway lingers between messages; and a first token is sent on at once, without waiting for a second,
busy or not (services/common/coalesce.py)."""

from __future__ import annotations

import json

import pytest

from services.common.speed_policies import StreamPacing
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks
from tests.support.pipeline import HEADERS, agent_canvas, create_agent, pipeline

N = 400
TEXT = " ".join(f"w{i}é\"\\" for i in range(N))  # non-ASCII, quotes and backslashes must survive every JSON layer


def _frames(raw: bytes, prefix: bytes) -> list[dict]:
    """The JSON of each event's data line (an event may also carry an `id:` line)."""
    frames = [f.split(b"\n")[0] for f in raw.split(b"\n\n") if f]
    assert all(f.startswith(prefix) for f in frames), frames[:3]
    return [json.loads(f[len(prefix):]) for f in frames if f[len(prefix):].strip() != b"[DONE]"]


def _ragflow(raw: bytes) -> list[str]:
    return [f["data"]["content"] for f in _frames(raw, b"data:") if f.get("event") == "message"]


def _openai(raw: bytes) -> list[str]:
    return [c["choices"][0]["delta"].get("content") for c in _frames(raw, b"data: ")
            if c.get("choices") and c["choices"][0]["delta"].get("content")]


def _envelope(raw: bytes) -> list[str]:
    return [f["data"]["delta"] for f in _frames(raw, b"data: ") if f["type"] == "content"]


DIALECTS = {
    "ragflow": (lambda a: ("/api/v1/agents/chat/completions", {"agent_id": a, "query": "go", "stream": True}), _ragflow),
    "openai": (lambda a: ("/v1/chat/completions", {"model": a, "stream": True,
                                                   "messages": [{"role": "user", "content": "go"}]}), _openai),
    "envelope": (lambda a: (f"/api/v1/agents/{a}/stream", {"query": "go"}), _envelope),
}


@pytest.fixture
async def fake_model():
    fake = FakeOpenAI()
    await fake.start()
    yield fake
    await fake.stop()


async def answer_pieces(redis_server, fake_model, dialect: str, **llm_cfg) -> list[str]:
    """The answer's pieces, as the client of `dialect` reads them, of one run of the Agent canvas."""
    request, contents = DIALECTS[dialect]
    async with pipeline(redis_server.url, openai_base_url=fake_model.base_url, openai_api_key="k", **llm_cfg) as p:
        agent_id = await create_agent(p.client, agent_canvas())
        path, body = request(agent_id)
        resp = await p.client.post(path, headers=HEADERS, json=body)
        assert resp.status == 200
        return contents(await resp.read())


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_every_token_arrives_exactly_and_merged_when_the_model_outruns_the_pipe(redis_server, fake_model, dialect):
    fake_model.chat(Reply.stream(text_chunks(TEXT)))  # one token per SSE chunk, as fast as the server writes
    pieces = await answer_pieces(redis_server, fake_model, dialect)
    assert "".join(pieces) == TEXT
    assert 1 <= len(pieces) < N


# The llm_gateway busy from its first stream on, with a linger longer than any test: a stream sends its first
# message at once and everything after it when the model's stream ends.
LINGERING = {"stream_pacing": StreamPacing("test", busy_streams=1, linger_s=3600)}


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_busy_gateway_sends_a_paced_stream_in_few_messages_and_exactly(redis_server, fake_model, dialect):
    text = " ".join(TEXT.split(" ")[:40])
    fake_model.chat(Reply.stream(text_chunks(text), delay_s=0.005))  # a token every 5 ms: no hop is ever behind
    pieces = await answer_pieces(redis_server, fake_model, dialect, **LINGERING)
    assert "".join(pieces) == text
    assert 1 <= len(pieces) <= 2  # the first network read's tokens, then the rest


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_the_first_token_is_sent_while_the_model_is_still_silent(redis_server, fake_model, dialect, busy):
    # The model sends its role chunk and one token, then nothing until the client leaves: the token must reach
    # the client anyway (no hop waits for more to fill a batch, nor lingers before a stream's first message).
    fake_model.chat(Reply.stream(text_chunks("hello world"), stall_after=2))
    request, contents = DIALECTS[dialect]
    async with pipeline(redis_server.url, openai_base_url=fake_model.base_url, openai_api_key="k",
                        **(LINGERING if busy else {})) as p:
        agent_id = await create_agent(p.client, agent_canvas())
        path, body = request(agent_id)
        resp = await p.client.post(path, headers=HEADERS, json=body)
        buffer = b""
        while not contents(buffer.rsplit(b"\n\n", 1)[0] + b"\n\n" if b"\n\n" in buffer else b""):
            buffer += await resp.content.readany()
        assert "".join(contents(buffer.rsplit(b"\n\n", 1)[0] + b"\n\n")) == "hello"
        resp.close()
