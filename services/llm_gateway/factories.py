"""RAGFlow's model factories that speak the OpenAI API: the endpoint each one uses, and how to configure it.

A canvas names its models by RAGFlow's factory names ("kimi-k2.5@Moonshot", "qwen-turbo@Tongyi-Qianwen",
"deepseek-v4-pro@default@DeepSeek"). A factory of this table is *configured* when its key is set
(`<PREFIX>_API_KEY`) or, for a self-hosted server that needs no key, its base URL (`<PREFIX>_BASE_URL`).
`<PREFIX>_BASE_URL` also moves a hosted factory elsewhere (a proxy, a regional endpoint, a test server).
A configured factory is *open*: any "<name>@<Factory>" goes to its endpoint as model "<name>".

The default base URLs are the ones RAGFlow uses (its factory list and model classes). Factories whose own
API is not OpenAI's (Bedrock, Azure-OpenAI, BaiduYiyan, Replicate, Voyage AI...) are not here: declare an
OpenAI-compatible endpoint for them in the providers file (providers_file.py). A providers-file factory of
the same name wins over this table.

OPENAI_API_KEY / OPENAI_BASE_URL keep their older meaning too: that endpoint also takes bare model names
(config.py, gateway.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Factory:
    name: str  # RAGFlow's factory name: the part after the last '@' of a model id
    prefix: str  # env names: <prefix>_API_KEY, <prefix>_BASE_URL
    base_url: str  # RAGFlow's endpoint; "" for a self-hosted server (its URL must be given)
    example_url: str = ""  # self-hosted: where such a server usually listens, for the error text

    @property
    def key_env(self) -> str:
        return f"{self.prefix}_API_KEY"

    @property
    def url_env(self) -> str:
        return f"{self.prefix}_BASE_URL"

    @property
    def self_hosted(self) -> bool:
        return not self.base_url

    def how_to_configure(self) -> str:
        """What a user sets to make this factory's models resolve."""
        if self.self_hosted:
            return (f"set {self.url_env} to the server's OpenAI-compatible endpoint (e.g. {self.example_url}; "
                    f"{self.key_env} if it wants a key)")
        return f"set {self.key_env} (endpoint {self.base_url}; {self.url_env} overrides it)"


def _hosted(name: str, prefix: str, base_url: str) -> Factory:
    return Factory(name, prefix, base_url)


def _self_hosted(name: str, prefix: str, example_url: str) -> Factory:
    return Factory(name, prefix, "", example_url)


FACTORIES: tuple[Factory, ...] = (
    # Hosted services (RAGFlow's default endpoint).
    _hosted("OpenAI", "OPENAI", "https://api.openai.com/v1"),
    _hosted("DeepSeek", "DEEPSEEK", "https://api.deepseek.com/v1"),
    _hosted("Moonshot", "MOONSHOT", "https://api.moonshot.cn/v1"),
    _hosted("Tongyi-Qianwen", "DASHSCOPE", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
    _hosted("ZHIPU-AI", "ZHIPUAI", "https://open.bigmodel.cn/api/paas/v4"),
    _hosted("SILICONFLOW", "SILICONFLOW", "https://api.siliconflow.cn/v1"),
    _hosted("siliconflow_intl", "SILICONFLOW_INTL", "https://api.siliconflow.com/v1"),
    _hosted("OpenRouter", "OPENROUTER", "https://openrouter.ai/api/v1"),
    _hosted("Groq", "GROQ", "https://api.groq.com/openai/v1"),
    _hosted("Mistral", "MISTRAL", "https://api.mistral.ai/v1"),
    _hosted("xAI", "XAI", "https://api.x.ai/v1"),
    _hosted("Gemini", "GEMINI", "https://generativelanguage.googleapis.com/v1beta/openai"),
    _hosted("Anthropic", "ANTHROPIC", "https://api.anthropic.com/v1"),
    _hosted("Cohere", "COHERE", "https://api.cohere.ai/compatibility/v1"),
    _hosted("NVIDIA", "NVIDIA", "https://integrate.api.nvidia.com/v1"),
    _hosted("DeepInfra", "DEEPINFRA", "https://api.deepinfra.com/v1/openai"),
    _hosted("TogetherAI", "TOGETHERAI", "https://api.together.xyz/v1"),
    _hosted("VolcEngine", "VOLCENGINE", "https://ark.cn-beijing.volces.com/api/v3"),
    _hosted("BaiChuan", "BAICHUAN", "https://api.baichuan-ai.com/v1"),
    _hosted("MiniMax", "MINIMAX", "https://api.minimaxi.com/v1"),
    _hosted("StepFun", "STEPFUN", "https://api.stepfun.com/v1"),
    _hosted("01.AI", "LINGYI", "https://api.lingyiwanwu.com/v1"),
    _hosted("Tencent Hunyuan", "HUNYUAN", "https://api.hunyuan.cloud.tencent.com/v1"),
    _hosted("Upstage", "UPSTAGE", "https://api.upstage.ai/v1/solar"),
    _hosted("NovitaAI", "NOVITA", "https://api.novita.ai/v3/openai"),
    _hosted("PPIO", "PPIO", "https://api.ppinfra.com/v3/openai"),
    _hosted("PerfXCloud", "PERFXCLOUD", "https://cloud.perfxlab.cn/v1"),
    _hosted("GiteeAI", "GITEEAI", "https://ai.gitee.com/v1"),
    _hosted("302.AI", "AI302", "https://api.302.ai/v1"),
    _hosted("Jiekou.AI", "JIEKOU", "https://api.jiekou.ai/openai"),
    _hosted("DeerAPI", "DEERAPI", "https://api.deerapi.com/v1"),
    _hosted("CometAPI", "COMETAPI", "https://api.cometapi.com/v1"),
    _hosted("LongCat", "LONGCAT", "https://api.longcat.chat/openai"),
    _hosted("TokenPony", "TOKENPONY", "https://ragflow.vip-api.tokenpony.cn/v1"),
    _hosted("GreenPT", "GREENPT", "https://api.greenpt.ai/v1"),
    _hosted("aimlapi.com", "AIMLAPI", "https://api.aimlapi.com/v1"),
    _hosted("n1n", "N1N", "https://api.n1n.ai/v1"),
    _hosted("Avian", "AVIAN", "https://api.avian.io/v1"),
    _hosted("Astraflow", "ASTRAFLOW", "https://api-us-ca.umodelverse.ai/v1"),
    _hosted("Astraflow-CN", "ASTRAFLOW_CN", "https://api.modelverse.cn/v1"),
    _hosted("FuturMix", "FUTURMIX", "https://futurmix.ai/v1"),
    _hosted("Xiaomi", "XIAOMI", "https://api.xiaomimimo.com/v1"),
    _hosted("RAGcon", "RAGCON", "https://connect.ragcon.com/v1"),
    # Self-hosted servers: no default endpoint, RAGFlow asks for the URL too.
    _self_hosted("Ollama", "OLLAMA", "http://localhost:11434/v1"),
    _self_hosted("LocalAI", "LOCALAI", "http://localhost:8080/v1"),
    _self_hosted("VLLM", "VLLM", "http://localhost:8000/v1"),
    _self_hosted("LM-Studio", "LM_STUDIO", "http://localhost:1234/v1"),
    _self_hosted("Xinference", "XINFERENCE", "http://localhost:9997/v1"),
    _self_hosted("OpenAI-API-Compatible", "OPENAI_COMPATIBLE", "http://localhost:8000/v1"),
    _self_hosted("GPUStack", "GPUSTACK", "http://localhost/v1"),
    _self_hosted("ModelScope", "MODELSCOPE", "https://api-inference.modelscope.cn/v1"),
    _self_hosted("HuggingFace", "HUGGINGFACE", "http://localhost:8080/v1"),
    _self_hosted("New API", "NEW_API", "http://localhost:3000/v1"),
)

_BY_NAME = {f.name.lower(): f for f in FACTORIES}


def find(name: str) -> Factory | None:
    """The table's factory of that name (case-insensitive), or None."""
    return _BY_NAME.get(name.strip().lower())


@dataclass(frozen=True)
class Endpoint:
    """A factory that the environment configures: where its models go, with which key."""

    factory: Factory
    base_url: str
    api_key: str


def configured(environ: Mapping[str, str]) -> dict[str, Endpoint]:
    """The table's factories that `environ` configures, by factory name.

    OpenAI is left out: config.py reads OPENAI_API_KEY / OPENAI_BASE_URL itself (that endpoint also takes
    bare model names).
    """
    out: dict[str, Endpoint] = {}
    for f in FACTORIES:
        if f.name == "OpenAI":
            continue
        key = environ.get(f.key_env, "").strip()
        url = environ.get(f.url_env, "").strip()
        if f.self_hosted and not url:
            continue  # a key alone says nothing about where the server is
        if not f.self_hosted and not key and not url:
            continue
        out[f.name] = Endpoint(f, (url or f.base_url).rstrip("/"), key)
    return out


def upstream_name(model_id: str) -> str:
    """The name an endpoint knows a model by: the id's first '@' part, without RAGFlow's "___<suffix>"
    (its UI marks models of self-hosted factories so: "qwen2___OpenAI-API")."""
    return model_id.split("@", 1)[0].split("___", 1)[0]


def provider_configured(environ: Mapping[str, str]) -> bool:
    """Whether `environ` points the gateway at any model provider besides the bundled local model
    (`trellis up` turns TRELLIS_MODEL_FALLBACK on when none is, so every canvas runs out of the box)."""
    return bool(environ.get("OPENAI_BASE_URL") or environ.get("OPENAI_API_KEY")
                or environ.get("TRELLIS_LLM_PROVIDERS") or configured(environ))
