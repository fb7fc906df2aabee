"""The models a RAGFlow template runs on in a test, three ways, from one set of scripts:

- "scripted": each `llm_id` of the template is mapped to a scripted model of a real llm_gateway;
- "provider": the template runs AS SHIPPED on a real-shaped provider: its model ids ("kimi-k2.5@Moonshot",
  "qwen-turbo@Tongyi-Qianwen", "deepseek-chat"...) resolve through the factory table to a local
  OpenAI-compatible server (FakeOpenAI + ScriptedOpenAI: streamed SSE, tool calls, usage), configured the
  way a user does it: `<FACTORY>_BASE_URL` and `<FACTORY>_API_KEY` (OPENAI_BASE_URL for bare names), and the
  default chat model ("" in a template) is `deepseek-chat@DeepSeek` on the same server;
- "fallback": the template runs as shipped with TRELLIS_MODEL_FALLBACK=1 and none of its factories
  configured: every named model runs on the default chat model (a scripted one), and `check(events)`
  asserts the run's events say so for each of them.

    async with template_models(mode, scripts, {"kimi-k2.5@Moonshot": "analyst"}, default="web") as tm:
        events = await run_canvas(tm.dsl(canvas), services(tm.llm, ...), query="...")
        tm.calls_to("analyst")         # what that model was shown (read off the wire in "provider")
    tm.check(events)                   # provider: keys went out; fallback: the events name each fallback

`scripts` is the `chat` section of a script book (providers/scripted.py); `models` maps a template's model
id to the script that plays it, `default` names the script of the default chat model. In "fallback" every
model is the default one, so the scripts in use are merged into one: they must all be `rules` (keyed by
the system prompt, with markers no other agent's prompt holds: the first rule that matches answers), or there
must be a single script.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from services.llm_gateway import factories
from services.orchestrator.engine.events import NodeFinished, RunFinished
from tests.support.fake_openai import FakeOpenAI
from tests.support.llm_gateway import RunningLlmGateway, llm_gateway
from tests.support.scripted_openai import ScriptedOpenAI

MODES = ("scripted", "provider", "fallback")
DEFAULT_MODEL = "deepseek-chat@DeepSeek"  # "provider": what "" means, a user's configured default
MERGED = "default"  # "fallback": the one scripted model every id runs on


@dataclass
class TemplateModels:
    mode: str
    llm: RunningLlmGateway
    models: dict[str, str]
    fake: FakeOpenAI | None = None
    served: ScriptedOpenAI | None = None
    keys: dict[str, str] = field(default_factory=dict)  # provider: the key each factory was given

    def dsl(self, canvas: Any) -> Any:
        """The canvas to run: its `llm_id`s mapped to scripted models ("scripted"), else as shipped."""
        if self.mode != "scripted":
            return canvas
        mapped = {mid: f"{script}@Scripted" for mid, script in self.models.items()}

        def walk(node: Any) -> Any:
            if isinstance(node, dict):
                return {k: (mapped.get(v, v) if k == "llm_id" else walk(v)) for k, v in node.items()}
            if isinstance(node, list):
                return [walk(v) for v in node]
            return node
        return walk(canvas)

    def calls_to(self, script: str) -> list[Any]:
        if self.served is not None:
            return self.served.calls_to(script)
        return self.llm.calls_to(MERGED if self.mode == "fallback" else script)

    def check(self, events: list[Any]) -> None:
        """What the mode promises, asserted on the run: keys sent, or the fallback said for every model."""
        if self.mode == "provider":
            assert self.fake is not None and self.fake.chat_requests(), "the provider was never asked"
            sent = {next((v for k, v in h.items() if k.lower() == "authorization"), "") for h in self.fake.headers}
            assert sent <= {f"Bearer {k}" for k in self.keys.values()}, sent
            assert all(r.get("stream") and r["stream_options"]["include_usage"] for r in self.fake.chat_requests())
            finished = [e for e in events if isinstance(e, RunFinished)]
            assert finished and finished[-1].usage.get("total_tokens", 0) > 0, "no usage came back over SSE"
        if self.mode == "fallback":
            named = {mid for mid in self.models if mid}
            notices = " ".join(str(e.inputs.get("model_fallback", "")) for e in events
                               if isinstance(e, NodeFinished) and isinstance(e.inputs, dict))
            for mid in named:
                assert f"model {mid!r} is not configured" in notices, (mid, notices)
            assert "TRELLIS_MODEL_FALLBACK=1" in notices or not named


@asynccontextmanager
async def template_models(mode: str, scripts: dict[str, Any], models: dict[str, str] | None = None, *,
                          default: str = "", **config: Any) -> AsyncIterator[TemplateModels]:
    models = dict(models or {})
    if default:
        models.setdefault("", default)
    if mode == "scripted":
        extra = {"default_chat_model": f"{default}@Scripted"} if default else {}
        async with llm_gateway({"chat": scripts}, **extra, **config) as llm:
            yield TemplateModels(mode, llm, models)
    elif mode == "provider":
        async with _provider(scripts, models, config) as tm:
            yield tm
    elif mode == "fallback":
        async with llm_gateway({"chat": {MERGED: merged(scripts, set(models.values()))}},
                               default_chat_model=f"{MERGED}@Scripted", model_fallback=True, **config) as llm:
            yield TemplateModels(mode, llm, models)
    else:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")


@asynccontextmanager
async def _provider(scripts: dict[str, Any], models: dict[str, str],
                    config: dict[str, Any]) -> AsyncIterator[TemplateModels]:
    ids = {(mid or DEFAULT_MODEL): script for mid, script in models.items()}
    names: dict[str, str] = {}
    for mid, script in ids.items():
        upstream = factories.upstream_name(mid)
        assert names.setdefault(upstream, script) == script, f"two scripts for the upstream model {upstream!r}"
    fake = FakeOpenAI()
    base_url = await fake.start()
    served = ScriptedOpenAI({"chat": scripts}, names)
    fake.responder = served
    env: dict[str, str] = {}
    keys: dict[str, str] = {}
    bare = False
    for mid in ids:
        if "@" not in mid:
            bare = True
            continue
        factory = factories.find(mid.rsplit("@", 1)[1])
        assert factory is not None, f"{mid}: not a factory of services/llm_gateway/factories.py"
        keys[factory.name] = f"sk-{factory.prefix.lower()}-test"
        env.update({factory.url_env: base_url, factory.key_env: keys[factory.name]})
    if bare:
        keys["OpenAI"] = "sk-openai-test"
        config = {**config, "openai_base_url": base_url, "openai_api_key": keys["OpenAI"]}
    extra = {"default_chat_model": DEFAULT_MODEL} if "" in models else {}
    try:
        async with llm_gateway(None, factory_endpoints=factories.configured(env), **extra, **config) as llm:
            yield TemplateModels("provider", llm, models, fake, served, keys)
    finally:
        await fake.stop()


def merged(scripts: dict[str, Any], used: set[str]) -> Any:
    """One script playing every script in `used`: the only one, or all their rules in order."""
    if len(used) == 1:
        return scripts[next(iter(used))]
    rules: list[Any] = []
    for name in sorted(used):
        script = scripts[name]
        assert isinstance(script, dict) and set(script) == {"rules"}, (
            f"fallback mode runs every model on one script: {name!r} must be `rules` to merge with {sorted(used)}")
        rules += script["rules"]
    return {"rules": rules}
