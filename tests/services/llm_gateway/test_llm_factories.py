"""RAGFlow's factory names: `model@Factory` reaches the factory's endpoint with the key from the environment;
an unconfigured one is an error saying what to set, unless the fallback runs the default chat model."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from aiohttp import web
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.llm_gateway import factories
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.errors import ModelNotFound
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.providers_file import load_providers_file
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks
from tests.support.llm_gateway import llm_gateway, text_of, user

# The models RAGFlow's agent templates name, with the factory env that configures each.
TEMPLATE_MODELS = [
    ("kimi-k2.5@Moonshot", "MOONSHOT", "Moonshot", "kimi-k2.5"),
    ("qwen-turbo@Tongyi-Qianwen", "DASHSCOPE", "Tongyi-Qianwen", "qwen-turbo"),
    ("deepseek-v4-pro@default@DeepSeek", "DEEPSEEK", "DeepSeek", "deepseek-v4-pro"),
    ("agnuxo/cajal-4b-p2pclaw@Ollama", "OLLAMA", "Ollama", "agnuxo/cajal-4b-p2pclaw"),
    ("qwen-vl-plus@Tongyi-Qianwen", "DASHSCOPE", "Tongyi-Qianwen", "qwen-vl-plus"),
]


class KeyedFake(FakeOpenAI):
    """The fake server, also recording the Authorization header of each request."""

    def __init__(self) -> None:
        super().__init__()
        self.auth: list[str] = []

    async def _record(self, request: web.Request) -> dict[str, Any]:
        self.auth.append(request.headers.get("Authorization", ""))
        return await super()._record(request)


@pytest.fixture
async def fake():
    server = KeyedFake()
    await server.start()
    yield server
    await server.stop()


def _gateway(environ: dict[str, str], **overrides: Any) -> LlmGateway:
    return LlmGateway.create(LlmGatewayConfig.for_tests(factory_endpoints=factories.configured(environ), **overrides))


@pytest.mark.parametrize(
    "factory,key_env,base_url",
    [
        ("Moonshot", "MOONSHOT_API_KEY", "https://api.moonshot.cn/v1"),
        ("Tongyi-Qianwen", "DASHSCOPE_API_KEY", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
        ("DeepSeek", "DEEPSEEK_API_KEY", "https://api.deepseek.com/v1"),
        ("ZHIPU-AI", "ZHIPUAI_API_KEY", "https://open.bigmodel.cn/api/paas/v4"),
        ("SILICONFLOW", "SILICONFLOW_API_KEY", "https://api.siliconflow.cn/v1"),
        ("OpenRouter", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1"),
        ("Groq", "GROQ_API_KEY", "https://api.groq.com/openai/v1"),
        ("Mistral", "MISTRAL_API_KEY", "https://api.mistral.ai/v1"),
        ("xAI", "XAI_API_KEY", "https://api.x.ai/v1"),
    ],
)
def test_a_key_alone_configures_a_hosted_factory_at_ragflows_endpoint(factory, key_env, base_url):
    endpoints = factories.configured({key_env: "sk-test"})
    assert list(endpoints) == [factory]
    assert (endpoints[factory].base_url, endpoints[factory].api_key) == (base_url, "sk-test")
    r = _gateway({key_env: "sk-test"}).registry.resolve(f"some-model@{factory}", "chat")
    assert (r.factory, r.upstream, r.provider.kind) == (factory, "some-model", "openai")


@pytest.mark.parametrize("factory,prefix", [("Ollama", "OLLAMA"), ("LocalAI", "LOCALAI"), ("VLLM", "VLLM"),
                                            ("LM-Studio", "LM_STUDIO"), ("Xinference", "XINFERENCE")])
def test_self_hosted_factories_need_their_base_url(factory, prefix):
    assert factories.configured({f"{prefix}_API_KEY": "k"}) == {}  # a key says nothing about where the server is
    endpoint = factories.configured({f"{prefix}_BASE_URL": "http://10.0.0.5:1234/v1/"})[factory]
    assert (endpoint.base_url, endpoint.api_key) == ("http://10.0.0.5:1234/v1", "")
    # RAGFlow marks self-hosted models "name___<suffix>": the server knows them by "name".
    r = _gateway({f"{prefix}_BASE_URL": "http://10.0.0.5:1234/v1"}).registry.resolve(f"qwen2___VLLM@{factory}", "chat")
    assert (r.id, r.upstream) == (f"qwen2@{factory}", "qwen2")


@pytest.mark.parametrize("model_id,prefix,factory,upstream", TEMPLATE_MODELS)
async def test_template_models_reach_their_factory_with_its_key(fake, model_id, prefix, factory, upstream):
    environ = {f"{prefix}_API_KEY": f"sk-{prefix.lower()}", f"{prefix}_BASE_URL": fake.base_url}
    fake.chat(Reply.stream(text_chunks(f"hello from {factory}")))
    async with llm_gateway(config=LlmGatewayConfig.for_tests(factory_endpoints=factories.configured(environ))) as gw:
        chunks = await gw.chat(llm_pb.ChatRequest(model_id=model_id, messages=[user("hi")]))
    assert text_of(chunks) == f"hello from {factory}"
    assert chunks[0].model == f"{upstream}@{factory}" and not chunks[0].notice
    assert fake.chat_requests()[0]["model"] == upstream
    assert fake.auth == [f"Bearer sk-{prefix.lower()}"]


def test_embedding_models_resolve_by_factory_too():
    r = _gateway({"SILICONFLOW_API_KEY": "k"}).registry.resolve("BAAI/bge-m3@SILICONFLOW", "embedding")
    assert (r.type, r.upstream, r.factory) == ("embedding", "BAAI/bge-m3", "SILICONFLOW")


def test_an_unconfigured_factory_says_exactly_what_to_set():
    reg = _gateway({}).registry
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("kimi-k2.5@Moonshot", "chat")
    msg = err.value.message
    assert msg.startswith("unknown chat model 'kimi-k2.5@Moonshot': factory Moonshot is not configured")
    for needle in ("MOONSHOT_API_KEY", "https://api.moonshot.cn/v1", "MOONSHOT_BASE_URL", "TRELLIS_LLM_PROVIDERS",
                   "TRELLIS_MODEL_FALLBACK=1"):
        assert needle in msg, needle
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("agnuxo/cajal-4b-p2pclaw@Ollama", "chat")
    assert "OLLAMA_BASE_URL" in err.value.message and "http://localhost:11434/v1" in err.value.message
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("m@NoSuchFactory", "chat")
    assert "'NoSuchFactory' is not one of RAGFlow's OpenAI-compatible factories" in err.value.message
    assert "base_url in the providers file" in err.value.message
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("text-embedding-v3@Tongyi-Qianwen", "embedding")
    assert "DASHSCOPE_API_KEY" in err.value.message and "FALLBACK" not in err.value.message  # chat only


async def test_the_fallback_runs_the_default_chat_model_and_says_so():
    scripts = {"chat": {"demo": ["from the default"]}}
    cfg = LlmGatewayConfig.for_tests(default_chat_model="demo@Scripted", model_fallback=True)
    async with llm_gateway(config=cfg, scripts=scripts) as gw:
        chunks = await gw.chat(llm_pb.ChatRequest(model_id="kimi-k2.5@Moonshot", messages=[user("hi")]))
        assert text_of(chunks) == "from the default"
        assert chunks[0].model == "demo@Scripted"
        notice = chunks[0].notice
        assert "'kimi-k2.5@Moonshot' is not configured" in notice and "MOONSHOT_API_KEY" in notice
        assert "demo@Scripted" in notice and notice.endswith("because TRELLIS_MODEL_FALLBACK=1")
        assert "runs it on the default" not in notice  # the hint to turn the fallback on is for errors only
        assert all(not c.notice for c in chunks[1:])
        whole = await gw.stub.Complete(llm_pb.ChatRequest(model_id="kimi-k2.5@Moonshot", messages=[user("hi")]), timeout=5)
        assert (whole.content_delta, whole.model, whole.notice) == ("from the default", "demo@Scripted", notice)
        # A configured model is not touched by the fallback, and embeddings never fall back.
        ok = await gw.chat(llm_pb.ChatRequest(model_id="demo@Scripted", messages=[user("again")]))
        assert not any(c.notice for c in ok)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.stub.Embed(llm_pb.EmbedRequest(model_id="emb@Moonshot", texts=["x"]), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_without_the_fallback_an_unknown_model_is_not_found_over_grpc():
    cfg = LlmGatewayConfig.for_tests(default_chat_model="demo@Scripted")
    async with llm_gateway(config=cfg, scripts={"chat": {"demo": ["x"]}}) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.chat(llm_pb.ChatRequest(model_id="qwen-turbo@Tongyi-Qianwen", messages=[user("hi")]))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "qwen-turbo@Tongyi-Qianwen" in err.value.details() and "DASHSCOPE_API_KEY" in err.value.details()


def test_providers_file_entry_for_a_known_factory_needs_neither_url_nor_key(tmp_path, fake):
    path = tmp_path / "providers.yaml"
    path.write_text("factories:\n  Moonshot:\n    open: false\n    models:\n      kimi-k2.5: {}\n")
    spec = load_providers_file(path, {"MOONSHOT_API_KEY": "sk-moon"})
    assert spec.factories["Moonshot"].api_key == "sk-moon"
    # The file's entry replaces the environment's: a closed factory knows only its models.
    reg = LlmGateway.create(LlmGatewayConfig.for_tests(
        providers=spec, factory_endpoints=factories.configured({"MOONSHOT_API_KEY": "sk-env"}))).registry
    assert reg.resolve("kimi-k2.5@Moonshot", "chat").factory == "Moonshot"
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("moonshot-v1-8k@Moonshot", "chat")
    assert "factory Moonshot is configured but declares no such chat model" in err.value.message


def test_trellis_up_turns_the_fallback_on_only_without_a_provider(monkeypatch, tmp_path):
    from trellis_cli.stack import plan_stack

    monkeypatch.setenv("TRELLIS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRELLIS_REDIS_URL", "redis://127.0.0.1:1/0")
    for name in ("TRELLIS_MODEL_FALLBACK", "OPENAI_BASE_URL", "OPENAI_API_KEY", "TRELLIS_LLM_PROVIDERS"):
        monkeypatch.delenv(name, raising=False)
    for f in factories.FACTORIES:
        monkeypatch.delenv(f.key_env, raising=False)
        monkeypatch.delenv(f.url_env, raising=False)
    assert plan_stack()[1]["TRELLIS_MODEL_FALLBACK"] == "1"
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    assert plan_stack()[1]["TRELLIS_MODEL_FALLBACK"] == "0"
    monkeypatch.setenv("TRELLIS_MODEL_FALLBACK", "1")  # an explicit setting is kept
    assert plan_stack()[1]["TRELLIS_MODEL_FALLBACK"] == "1"


def _template_model_ids() -> set[str]:
    import json
    from pathlib import Path

    found: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            if isinstance(value.get("llm_id"), str) and value["llm_id"]:
                found.add(value["llm_id"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in sorted((Path(__file__).resolve().parents[2] / "data" / "templates").glob("*.json")):
        walk(json.loads(path.read_text()))
    return found


def test_every_model_the_shipped_templates_name_resolves_once_its_factory_is_configured():
    ids = _template_model_ids()
    assert {"kimi-k2.5@Moonshot", "deepseek-v4-pro@default@DeepSeek", "agnuxo/cajal-4b-p2pclaw@Ollama"} <= ids
    environ = {"MOONSHOT_API_KEY": "k", "DASHSCOPE_API_KEY": "k", "DEEPSEEK_API_KEY": "k",
               "OLLAMA_BASE_URL": "http://127.0.0.1:11434/v1"}
    configured, unconfigured = _gateway(environ).registry, _gateway({}).registry
    for model_id in sorted(ids):
        factory = model_id.rsplit("@", 1)[1]
        assert configured.resolve(model_id, "chat").factory == factory
        with pytest.raises(ModelNotFound) as err:
            unconfigured.resolve(model_id, "chat")
        hint = factories.find(factory)
        assert hint is not None and (hint.key_env if not hint.self_hosted else hint.url_env) in err.value.message
