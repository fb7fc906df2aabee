"""The whole chain in one process, each part on its own port: HTTP gateway -> orchestrator (Redis) ->
llm_gateway -> a model. A client that hangs up closes the model's stream upstream; the bundled local model
answers a one-tool Agent through every layer."""

from __future__ import annotations

import asyncio
import json

import openai

from tests.support.canvas import registered
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks
from tests.support.pipeline import HEADERS, KEY, create_agent, pipeline
from tests.support.tool_doubles import WeatherTool

# The bundled model with deadlines against a hang only: it answers in seconds when idle, far slower when loaded.
LOCAL_MODEL = {"local_enabled": True, "local_context": 2048, "timeout_s": 100, "stream_idle_s": 100}


def _canvas(model_cpn: dict) -> dict:
    def cpn(name, down, params, up):
        return {"obj": {"component_name": name, "params": params}, "downstream": down, "upstream": up}

    return {"components": {
        "begin": cpn("Begin", ["Agent:a"], {}, []),
        "Agent:a": cpn("Agent", ["Message:m"], model_cpn, ["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}, ["Agent:a"]),
    }}


async def test_client_hang_up_closes_the_model_stream_upstream(redis_server):
    fake = FakeOpenAI()
    base_url = await fake.start()
    fake.chat(Reply.stream(text_chunks("word " * 2000), delay_s=0.05))  # 100 s unless the hang-up cuts it
    try:
        async with pipeline(redis_server.url, openai_base_url=base_url, openai_api_key="k") as p:
            client = p.client
            agent_id = await create_agent(client, _canvas({"llm_id": "gpt-test", "sys_prompt": "Talk.", "max_rounds": 1}))
            resp = await client.post("/api/v1/agents/chat/completions", headers=HEADERS,
                                     json={"agent_id": agent_id, "query": "talk a lot", "stream": True})
            async for line in resp.content:
                if line.startswith(b"data:") and b'"event": "message"' in line:
                    break
            assert not fake.disconnected.is_set()
            resp.close()  # the client hangs up mid-answer
            await asyncio.wait_for(fake.disconnected.wait(), 30)  # long before the stream's 100 s were over
    finally:
        await fake.stop()


async def test_one_tool_agent_answers_through_every_layer_with_the_local_model(redis_server):
    dsl = _canvas({"llm_id": "", "sys_prompt": "You are a helpful assistant.", "max_rounds": 1,
                   "max_tokens": 32, "maxTokensEnabled": True, "top_p": 0.01, "topPEnabled": True,
                   "tools": [{"component_name": "TestWeatherTool", "name": "Weather", "params": {}}]})
    with registered(WeatherTool):
        async with pipeline(redis_server.url, **LOCAL_MODEL) as p:
            client = p.client
            agent_id = await create_agent(client, dsl)
            async with openai.AsyncOpenAI(api_key=KEY, base_url=str(client.server.make_url("/v1")), max_retries=0) as oai:
                reply = await oai.chat.completions.create(
                    model=agent_id, messages=[{"role": "user", "content": "What's the weather in Paris?"}])
            assert reply.choices[0].message.content.strip()
            resp = await client.post("/api/v1/agents/chat/completions", headers=HEADERS,
                                     json={"agent_id": agent_id, "query": "Weather in Oslo?", "return_trace": True})
            body = await resp.json()
            assert body["code"] == 0, body
            trace = json.dumps(body["data"]["data"].get("trace", []))
            assert "Sunny, 21 degrees in" in trace  # the tool really ran, and its result is in the Agent's trace


async def test_run_log_endpoint_shows_the_agents_tool_calls(redis_server):
    with registered(WeatherTool):
        async with pipeline(redis_server.url, **LOCAL_MODEL) as p:
            client = p.client
            agent_id = await create_agent(client, _canvas({
                "llm_id": "", "sys_prompt": "You are a helpful assistant.", "max_rounds": 1, "max_tokens": 32,
                "maxTokensEnabled": True, "tools": [{"component_name": "TestWeatherTool", "name": "Weather", "params": {}}]}))
            body = await (await client.post("/api/v1/agents/chat/completions", headers=HEADERS,
                                            json={"agent_id": agent_id, "query": "Weather in Rome?"})).json()
            run_id = body["data"]["message_id"]
            log = await (await client.get(f"/api/v1/agents/{agent_id}/logs/{run_id}", headers=HEADERS)).json()
            assert log["code"] == 0 and log["data"]["status"] == "succeeded"
            assert any(c["tool_name"].startswith("get_weather") and "Sunny" in c["result"] for c in log["data"]["logs"])
            assert log["data"]["thoughts"]
            other = await (await client.get(f"/api/v1/agents/not-this-agent/logs/{run_id}", headers=HEADERS)).json()
            assert other["code"] == 103 and "permission" in other["message"]  # RAGFlow's answer for an agent out of reach
