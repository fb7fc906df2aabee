"""The RAGFlow Python SDK (ragflow-sdk 0.22.x, the newest that installs on Python 3.11) against the gateway."""

from __future__ import annotations

import asyncio

from ragflow_sdk import RAGFlow

DSL = {"components": {"begin": {"obj": {"component_name": "Begin", "params": {}}}}, "graph": {}}


def _conversation(base_url: str, key: str) -> dict:
    """What a user of the SDK writes; runs in a thread (the SDK is blocking, the server shares our loop)."""
    rag = RAGFlow(api_key=key, base_url=base_url)
    rag.create_agent(title="SDK agent", dsl=DSL, description="made by the SDK")
    agent = [a for a in rag.list_agents() if a.title == "SDK agent"][0]
    agent = rag.list_agents(id=agent.id)[0]
    session = agent.create_session()
    answer = list(session.ask("hi", stream=False))
    deltas = [m.content for m in session.ask("hi again", stream=True)]
    sessions = agent.list_sessions()
    agent.delete_sessions(ids=[session.id])
    return {"agent_id": agent.id, "session_id": session.id, "answer": [m.content for m in answer], "deltas": deltas,
            "listed": [s.id for s in sessions], "prologue": session.message[0]["content"]}


async def test_sdk_creates_a_session_and_asks_streaming_and_not(stack):
    out = await asyncio.to_thread(_conversation, stack.url, stack.key_a)
    assert out["answer"] == ["Hello world"]
    assert out["deltas"] == ["Hello", " world"]
    assert out["listed"] == [out["session_id"]]
    assert out["prologue"].startswith("Hi!")
    assert [(r.query, r.session_id) for r in stack.fake.run_requests] == [("hi", out["session_id"]),
                                                                           ("hi again", out["session_id"])]
    assert (stack.tenant_a, out["session_id"]) not in stack.fake.sessions


async def test_sdk_with_a_bad_key_raises_the_server_message(stack):
    def attempt() -> str:
        try:
            RAGFlow(api_key="wrong", base_url=stack.url).list_agents()
        except Exception as exc:  # the SDK raises a bare Exception(message)
            return str(exc)
        return ""

    assert await asyncio.to_thread(attempt) == "Authentication error: API key is invalid!"
