"""OpenAI's chat API on the gateway, driven by the official `openai` client."""

from __future__ import annotations

import json

import openai
import pytest


def _client(stack, key: str | None = None, base: str = "/v1") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key or stack.key_a, base_url=stack.url + base, max_retries=0, timeout=10)


async def test_non_stream_answer_usage_and_reference(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack) as client:
        done = await client.chat.completions.create(model=agent.id, messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "Hello world"
    assert done.choices[0].finish_reason == "stop"
    assert done.model == agent.id
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (5, 2, 7)
    assert done.choices[0].message.model_extra["reference"]["doc_aggs"]["doc.pdf"]["count"] == 1
    req = stack.fake.run_requests[-1]
    assert req.query == "hi" and req.tenant_id == stack.tenant_a and req.create_session and not req.session_id
    assert stack.fake.sessions[(stack.tenant_a, done.id)].source == "agent"  # the one call made the session


async def test_stream_role_first_finish_last_usage_when_asked(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack) as client:
        stream = await client.chat.completions.create(model=agent.id, stream=True, stream_options={"include_usage": True},
                                                      messages=[{"role": "user", "content": "hi"}])
        chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello world"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 7
    assert all(c.usage is None for c in chunks[:-1])
    refs = [c.choices[0].delta.model_extra.get("reference") for c in chunks if c.choices and c.choices[0].delta.model_extra]
    assert refs and refs[0]["chunks"]["7"]["id"] == "c1"


async def test_stream_wire_format_has_a_space_and_done(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.post("/v1/chat/completions", headers=stack.auth(),
                                   json={"model": agent.id, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    raw = (await resp.read()).decode()
    frames = raw.split("\n\n")
    assert resp.headers["X-Accel-Buffering"] == "no"
    assert all(f.startswith("data: ") for f in frames if f)
    assert raw.endswith("data: [DONE]\n\n")
    last = json.loads(frames[-3][len("data: "):])
    assert last["choices"][0]["finish_reason"] == "stop" and "usage" not in last


async def test_a_whole_answer_is_compact_json(stack):
    # Written by the one encoder of the hot paths (orjson), as the stream's frames are, not by json.dumps.
    agent = stack.fake.add_agent(stack.tenant_a)
    resp = await stack.client.post("/v1/chat/completions", headers=stack.auth(),
                                   json={"model": agent.id, "messages": [{"role": "user", "content": "hi"}]})
    raw = await resp.read()
    assert resp.status == 200 and resp.content_type == "application/json"
    assert raw.startswith(b'{"id":') and b'"object":"chat.completion"' in raw and b'": ' not in raw


async def test_stream_error_mid_run_raises_in_the_client(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack) as client:
        stream = await client.chat.completions.create(model=agent.id, stream=True,
                                                      messages=[{"role": "user", "content": "explode"}])
        seen = []
        with pytest.raises(openai.APIError, match="boom"):
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content)
    assert "partial" in seen


async def test_session_id_continues_the_conversation_and_history_is_not_resent(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack) as client:
        first = await client.chat.completions.create(model=agent.id, messages=[{"role": "user", "content": "hi"}])
        history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                   {"role": "assistant", "content": "Hello world"}, {"role": "user", "content": "and now?"}]
        again = await client.chat.completions.create(model=agent.id, messages=history, extra_body={"session_id": first.id})
        meta = await client.chat.completions.create(model=agent.id, messages=history, metadata={"id": first.id})
    assert again.id == meta.id == first.id
    assert [r.session_id for r in stack.fake.run_requests] == ["", first.id, first.id]  # the first run made it
    assert stack.fake.run_requests[-1].query == "and now?"
    assert len([k for k in stack.fake.sessions if k[0] == stack.tenant_a]) == 1


async def test_without_session_each_call_is_a_fresh_session_with_the_last_user_message(stack):
    from gateway.protocol import ChatMessageIn
    from gateway.routes.openai import split_messages

    agent = stack.fake.add_agent(stack.tenant_a)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one"},
                {"role": "assistant", "content": "1"}, {"role": "user", "content": [{"type": "text", "text": "two"}]}]
    async with _client(stack) as client:
        a = await client.chat.completions.create(model=agent.id, messages=messages, user="alice")
        b = await client.chat.completions.create(model=agent.id, messages=messages, user="alice")
    assert a.id != b.id
    assert [r.query for r in stack.fake.run_requests] == ["two", "two"]
    assert stack.fake.sessions[(stack.tenant_a, a.id)].user_id == "alice"
    query, history = split_messages([ChatMessageIn.model_validate(m) for m in messages])
    assert query == "two" and [(m.role, m.text()) for m in history] == [("user", "one"), ("assistant", "1")]


async def test_models_lists_only_the_tenants_agents(stack):
    mine = stack.fake.add_agent(stack.tenant_a, "mine")
    stack.fake.add_agent(stack.tenant_b, "theirs")
    async with _client(stack) as client:
        models = [m async for m in client.models.list()]
        one = await client.models.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError) as err:
            await client.models.retrieve("nope")
    assert [m.id for m in models] == [mine.id] and models[0].owned_by == stack.tenant_a
    assert one.id == mine.id
    assert err.value.body["code"] == "model_not_found"


async def test_ragflow_openai_paths(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack, base=f"/api/v1/agents_openai/{agent.id}") as client:
        done = await client.chat.completions.create(model="ignored", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "Hello world"
    resp = await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(), json={
        "agent_id": agent.id, "openai-compatible": True, "messages": [{"role": "user", "content": "hi"}]})
    body = await resp.json()
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"] == "Hello world"
    resp = await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(), json={
        "agent_id": agent.id, "openai-compatible": True, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert (await resp.read()).decode().endswith("data: [DONE]\n\n")


async def test_openai_errors_have_openai_bodies_and_statuses(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="no-such-agent", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError) as no_user:
            await client.chat.completions.create(model=agent.id, messages=[{"role": "system", "content": "x"}])
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model=agent.id, messages=[{"role": "user", "content": "hi"}],
                                                 extra_body={"session_id": "nope"})
        with pytest.raises(openai.InternalServerError, match="boom"):
            await client.chat.completions.create(model=agent.id, messages=[{"role": "user", "content": "explode"}])
    assert "not found" in missing.value.message
    assert no_user.value.body == {"message": 'invalid request body: field `messages` has no message with role "user"',
                                  "type": "invalid_request_error", "param": "messages", "code": None}


async def test_think_blocks_arrive_inline(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    async with _client(stack) as client:
        done = await client.chat.completions.create(model=agent.id, messages=[{"role": "user", "content": "think"}])
    assert done.choices[0].message.content == "<think>pondering</think>Hello world"
