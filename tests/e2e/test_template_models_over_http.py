"""A RAGFlow template as shipped (photo_text_translator.json, model `qwen-vl-plus@Tongyi-Qianwen`) through
RAGFlow's HTTP API and SSE, with the llm_gateway configured from the environment the way a user does it:
- DASHSCOPE_BASE_URL / DASHSCOPE_API_KEY point the template's factory at a local OpenAI-compatible server
  (tests/support/scripted_openai.py), which is asked for the template's own model name;
- nothing configured but TRELLIS_MODEL_FALLBACK=1 and a scripted default chat model (TRELLIS_LLM_SCRIPTS):
  the run's node_finished event says the model ran on the default.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from services.common.config import ServerConfig
from services.llm_gateway.config import LlmGatewayConfig
from tests.support.data import DATA
from tests.support.fake_openai import FakeOpenAI
from tests.support.pipeline import HEADERS, create_agent, pipeline
from tests.support.scripted_openai import ScriptedOpenAI

ANSWER = "**Detected (French):** Sortie\n**Translation:** Exit"
SCRIPTS = {"chat": {"translator": [ANSWER]}}
AGENT = "Agent:CoolPandasCrash"
USER_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "TRELLIS_LLM_PROVIDERS", "TRELLIS_DEFAULT_CHAT_MODEL",
            "TRELLIS_MODEL_FALLBACK", "TRELLIS_LLM_SCRIPTS", "DASHSCOPE_BASE_URL", "DASHSCOPE_API_KEY")


def from_env() -> LlmGatewayConfig:
    """What `python -m services.llm_gateway` reads, on a test port and without the bundled local model."""
    return dataclasses.replace(LlmGatewayConfig.from_env(), server=ServerConfig.for_tests("llm_gateway"),
                               local_enabled=False)


async def sse_run(redis_url: str, cfg: LlmGatewayConfig) -> list[dict]:
    dsl = json.loads((DATA / "templates" / "photo_text_translator.json").read_text(encoding="utf-8"))
    async with pipeline(redis_url, config=cfg) as p:
        agent_id = await create_agent(p.client, dsl)
        resp = await p.client.post("/api/v1/agents/chat/completions", headers=HEADERS,
                                   json={"agent_id": agent_id, "query": "The sign says: Sortie", "stream": True})
        return [json.loads(line[5:]) for line in (await resp.read()).decode().splitlines() if line.startswith("data:{")]


@pytest.mark.parametrize("mode", ["provider", "fallback"])
async def test_the_shipped_template_runs_on_what_the_environment_configures(redis_server, monkeypatch, tmp_path, mode):
    for name in USER_ENV:
        monkeypatch.delenv(name, raising=False)
    fake = FakeOpenAI()
    served = ScriptedOpenAI(SCRIPTS, {"qwen-vl-plus": "translator"})
    fake.responder = served
    base_url = await fake.start()
    if mode == "provider":
        monkeypatch.setenv("DASHSCOPE_BASE_URL", base_url)
        monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-dashscope-user")
    else:
        (tmp_path / "scripts.json").write_text(json.dumps(SCRIPTS))
        monkeypatch.setenv("TRELLIS_LLM_SCRIPTS", str(tmp_path / "scripts.json"))
        monkeypatch.setenv("TRELLIS_DEFAULT_CHAT_MODEL", "translator@Scripted")
        monkeypatch.setenv("TRELLIS_MODEL_FALLBACK", "1")
    try:
        events = await sse_run(redis_server.url, from_env())
    finally:
        await fake.stop()
    assert all("event" in e for e in events), [e for e in events if "event" not in e]  # no error frame
    assert events[-1]["event"] == "workflow_finished"
    assert events[-1]["data"]["outputs"]["content"] == ANSWER
    assert not [e for e in events if e["event"] == "node_finished" and e["data"].get("error")]
    [agent] = [e["data"] for e in events if e["event"] == "node_finished" and e["data"]["component_id"] == AGENT]
    if mode == "provider":
        [request] = fake.chat_requests()
        assert request["model"] == "qwen-vl-plus" and request["stream"] is True
        assert request["messages"][-1]["content"].startswith("The user query is The sign says: Sortie")
        assert fake.headers[0]["Authorization"] == "Bearer sk-dashscope-user"
        assert "model_fallback" not in agent["inputs"]
    else:
        assert not fake.chat_requests()  # nothing configured DashScope
        notice = agent["inputs"]["model_fallback"]
        assert "'qwen-vl-plus@Tongyi-Qianwen' is not configured" in notice and "DASHSCOPE_API_KEY" in notice
        assert "translator@Scripted" in notice
