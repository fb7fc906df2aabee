"""A RAGFlow canvas with a web tool through every layer: RAGFlow's HTTP API and SSE -> orchestrator ->
TavilySearch against a local server speaking Tavily's API, and an OpenAI-compatible provider (a local
server speaking the OpenAI API) for the model. The stream ends in workflow_finished, and message_end carries
the web results as RAGFlow's references."""
from __future__ import annotations

import json

from services.orchestrator.engine.settings import EngineSettings
from tests.support.data import DATA
from tests.support.fake_openai import FakeOpenAI, Reply, chunk, text_chunks, tool_delta
from tests.support.fake_web_api import FakeWebApi
from tests.support.pipeline import HEADERS, create_agent, pipeline


def tavily(seen):
    q = seen.json["query"]
    return {"query": q, "results": [{"title": f"{q} review", "url": "https://reviews.example/x200", "score": 0.8,
                                     "content": "The X200 charges from 10 to 80 percent in 40 minutes."}]}


async def test_categorize_and_agent_with_tavily_over_ragflows_sse(redis_server, monkeypatch):
    # As shipped: its "deepseek-chat" goes to the OPENAI_BASE_URL endpoint (bare names), the test's server.
    dsl = json.loads((DATA / "dsl_examples" / "categorize_and_agent_with_tavily.json").read_text(encoding="utf-8"))
    model = FakeOpenAI()
    base_url = await model.start()
    model.chat(
        Reply.stream(text_chunks("product_related")),  # Categorize
        Reply.stream([chunk(role="assistant", tool_calls=[tool_delta(0, id="call_1", name="tavily_search_0",
                                                                      arguments='{"query": "X200 charging"}')]),
                      chunk(finish_reason="tool_calls")]),
        Reply.stream(text_chunks("About 40 minutes to 80 percent [ID:0].")))
    try:
        async with FakeWebApi() as web:
            monkeypatch.setenv("TRELLIS_TAVILY_BASE_URL", web.url)
            web.route("POST", "/search", tavily)
            async with pipeline(redis_server.url, engine=EngineSettings(ssrf_allowlist=("127.0.0.1",)),
                                openai_base_url=base_url, openai_api_key="k") as p:
                agent_id = await create_agent(p.client, dsl)
                resp = await p.client.post("/api/v1/agents/chat/completions", headers=HEADERS,
                                         json={"agent_id": agent_id, "query": "How fast does the X200 charge?",
                                               "stream": True})
                events = [json.loads(line[5:]) for line in (await resp.read()).decode().splitlines()
                          if line.startswith("data:{")]
    finally:
        await model.stop()
    assert all("event" in e for e in events), [e for e in events if "event" not in e]  # no error frame
    assert events[-1]["event"] == "workflow_finished"
    assert events[-1]["data"]["outputs"]["content"] == "About 40 minutes to 80 percent [ID:0]."
    assert not [e for e in events if e["event"] == "node_finished" and e["data"].get("error")]
    assert "".join(e["data"]["content"] for e in events if e["event"] == "message") == (
        "About 40 minutes to 80 percent [ID:0].")
    [end] = [e for e in events if e["event"] == "message_end"]
    chunks = end["data"]["reference"]["chunks"]
    assert [c["url"] for c in chunks.values()] == ["https://reviews.example/x200"]
    assert end["data"]["reference"]["doc_aggs"]["X200 charging review"]["url"] == "https://reviews.example/x200"
    [search] = web.seen("/search")
    assert search.json["query"] == "X200 charging"
    assert search.headers["Authorization"].startswith("Bearer tvly-dev-")
    assert {r["model"] for r in model.chat_requests()} == {"deepseek-chat"}
    final = model.chat_requests()[-1]
    tool_msg = [m for m in final["messages"] if m["role"] == "tool"][0]
    assert "The X200 charges from 10 to 80 percent in 40 minutes." in tool_msg["content"]
