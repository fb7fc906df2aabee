"""Model id resolution, the providers file, and what ListModels reports."""

from __future__ import annotations

import json

import grpc
import pytest
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.errors import InvalidArgument
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.errors import ModelNotFound
from services.llm_gateway.gateway import LlmGateway
from services.llm_gateway.providers_file import load_providers_file
from tests.support.llm_gateway import llm_gateway

PROVIDERS_YAML = """
default_chat_model: qwen-plus@Tongyi-Qianwen
factories:
  Tongyi-Qianwen:
    base_url: http://127.0.0.1:9/v1
    api_key_env: TEST_QWEN_KEY
    models:
      qwen-plus:
      text-embedding-v3: {type: embedding}
      gte-rerank: {type: rerank, model: gte-rerank-v2}
  DeepSeek:
    base_url: http://127.0.0.1:9/v1
    api_key: sk-literal
    open: false
    models:
      deepseek-chat: {}
  Other:
    base_url: http://127.0.0.1:9/v1
    models:
      qwen-plus: {}
"""


@pytest.fixture
def providers(tmp_path):
    path = tmp_path / "providers.yaml"
    path.write_text(PROVIDERS_YAML)
    return load_providers_file(path, {"TEST_QWEN_KEY": "sk-qwen"})


def _gateway(providers=None, **overrides) -> LlmGateway:
    return LlmGateway.create(LlmGatewayConfig.for_tests(providers=providers, **overrides))


def test_name_at_factory_resolves_to_the_factory_and_upstream_name(providers):
    reg = _gateway(providers).registry
    r = reg.resolve("gte-rerank@Tongyi-Qianwen", "rerank")
    assert (r.id, r.factory, r.upstream, r.provider.kind) == ("gte-rerank@Tongyi-Qianwen", "Tongyi-Qianwen", "gte-rerank-v2", "openai")
    assert reg.resolve("QWEN-PLUS@tongyi-qianwen", "chat").id == "qwen-plus@Tongyi-Qianwen"  # case-insensitive
    assert providers.factories["Tongyi-Qianwen"].api_key == "sk-qwen"  # taken from api_key_env


def test_open_factories_pass_any_name_through_and_closed_ones_do_not(providers):
    reg = _gateway(providers).registry
    r = reg.resolve("qwen-max@Tongyi-Qianwen", "chat")
    assert (r.id, r.upstream) == ("qwen-max@Tongyi-Qianwen", "qwen-max")
    # RAGFlow's three-part ids: the factory is the last part, the model name the first.
    assert reg.resolve("qwen3-235b@default@Tongyi-Qianwen", "chat").upstream == "qwen3-235b"
    assert reg.resolve("deepseek-chat@DeepSeek", "chat").upstream == "deepseek-chat"
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("deepseek-reasoner@DeepSeek", "chat")
    assert "'deepseek-reasoner@DeepSeek'" in err.value.message and "deepseek-chat@DeepSeek" in err.value.message


def test_bare_names_empty_ids_and_ambiguity(providers):
    reg = _gateway(providers).registry
    assert reg.resolve("deepseek-chat", "chat").id == "deepseek-chat@DeepSeek"
    assert reg.resolve("", "chat").id == "qwen-plus@Tongyi-Qianwen"  # the file's default
    with pytest.raises(InvalidArgument) as err:
        reg.resolve("qwen-plus", "chat")  # two factories declare it
    assert "ambiguous" in err.value.message and "qwen-plus@Other" in err.value.message
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("mystery-model", "chat")
    assert err.value.code == grpc.StatusCode.NOT_FOUND and "'mystery-model'" in err.value.message


def test_env_endpoint_takes_bare_names_and_the_default_can_be_set():
    reg = _gateway(openai_base_url="http://127.0.0.1:9/v1", default_chat_model="gpt-4o-mini").registry
    assert reg.resolve("", "chat").id == "gpt-4o-mini@OpenAI"
    assert reg.resolve("deepseek-chat", "chat").upstream == "deepseek-chat"
    assert reg.resolve("anything@OpenAI", "embedding").type == "embedding"


def test_type_mismatch_is_a_clear_error(providers):
    with pytest.raises(InvalidArgument) as err:
        _gateway(providers).registry.resolve("text-embedding-v3@Tongyi-Qianwen", "chat")
    assert "is a embedding model; this call needs a chat model" in err.value.message


def test_local_models_are_the_default_when_nothing_is_configured():
    reg = _gateway(local_enabled=True).registry
    assert reg.resolve("", "chat").id == "SmolLM2-135M-Instruct@Local"
    assert reg.resolve("", "embedding").id == "all-MiniLM-L6-v2@Local"
    assert reg.resolve("smollm2-135m-instruct", "chat").provider.kind == "local"


def test_a_default_that_names_nothing_fails_at_start():
    with pytest.raises(SystemExit) as exc:
        _gateway(default_chat_model="ghost@Nowhere")
    assert "TRELLIS_DEFAULT_CHAT_MODEL" in str(exc.value) and "ghost@Nowhere" in str(exc.value)


@pytest.mark.parametrize(
    "text,suffix,env,needle",
    [
        ("factories:\n  X:\n    base_url: 5\n    colour: red\n", ".yaml", {}, "factories.X.colour"),
        ("factories:\n  X:\n    api_key_env: MISSING_KEY\n", ".yaml", {}, "MISSING_KEY is not set"),
        ("{not json", ".json", {}, "not valid JSON"),
        ("factories:\n  X:\n    models:\n      m: {type: vision}\n", ".yaml", {}, "factories.X.models.m.type"),
        ('{"factories": {"A@B": {}}}', ".json", {}, "cannot contain '@'"),
    ],
)
def test_providers_file_errors_name_the_field(tmp_path, text, suffix, env, needle):
    path = tmp_path / f"providers{suffix}"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        load_providers_file(path, env)
    assert needle in str(exc.value) and "TRELLIS_LLM_PROVIDERS" in str(exc.value)


def test_providers_file_in_json(tmp_path):
    path = tmp_path / "providers.json"
    path.write_text(json.dumps({"factories": {"Ollama": {"base_url": "http://127.0.0.1:11434/v1"}}}))
    spec = load_providers_file(path, {})
    assert spec.factories["Ollama"].open and spec.factories["Ollama"].stream


async def test_list_models_over_grpc(providers):
    scripts = {"chat": {"demo": ["hi"]}}
    async with llm_gateway(scripts, providers=providers) as gw:
        every = await gw.stub.ListModels(llm_pb.ListModelsRequest(), timeout=5)
        chats = await gw.stub.ListModels(llm_pb.ListModelsRequest(type=llm_pb.MODEL_TYPE_CHAT), timeout=5)
    ids = {m.id: m for m in every.models}
    assert {"qwen-plus@Tongyi-Qianwen", "text-embedding-v3@Tongyi-Qianwen", "demo@Scripted"} <= set(ids)
    assert ids["qwen-plus@Tongyi-Qianwen"].is_default and not ids["demo@Scripted"].is_default
    assert ids["demo@Scripted"].provider == "scripted"
    assert all(m.type == llm_pb.MODEL_TYPE_CHAT for m in chats.models)
    assert list(every.open_factories) == ["Other", "Tongyi-Qianwen"]


async def test_bad_requests_are_invalid_argument_naming_the_field():
    from trellis.llm.v1 import chat_pb2 as chat_pb

    async with llm_gateway({"chat": {"demo": ["hi"]}}) as gw:
        cases = [
            (llm_pb.ChatRequest(model_id="demo@Scripted"), "messages is empty"),
            (llm_pb.ChatRequest(model_id="demo@Scripted", messages=[chat_pb.ChatMessage(content="x")]), "messages[0].role"),
            (llm_pb.ChatRequest(model_id="demo@Scripted", messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_USER)],
                                tools=[chat_pb.Tool(name="t", parameters_json="{oops")]), "tools[0].parameters_json"),
            (llm_pb.ChatRequest(model_id="demo@Scripted", messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_TOOL)]),
             "without tool_call_id"),
            (llm_pb.ChatRequest(model_id="demo@Scripted", messages=[chat_pb.ChatMessage(role=chat_pb.ROLE_USER)],
                                response_format=chat_pb.ResponseFormat(type=chat_pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA)),
             "response_format.json_schema"),
        ]
        for req, needle in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await gw.chat(req)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, needle
            assert needle in err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.stub.Embed(llm_pb.EmbedRequest(model_id="demo@Scripted", texts=["x"]), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "needs a embedding model" in err.value.details()
