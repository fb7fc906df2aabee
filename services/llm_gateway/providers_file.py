"""The providers file (`TRELLIS_LLM_PROVIDERS`, YAML or JSON): RAGFlow factories -> OpenAI-compatible endpoints.

Example::

    default_chat_model: qwen-plus@Tongyi-Qianwen        # what "" means (TRELLIS_DEFAULT_CHAT_MODEL wins)
    default_embedding_model: text-embedding-v3@Tongyi-Qianwen
    default_rerank_model: ""                            # "": rank by embedding similarity
    factories:
      Tongyi-Qianwen:                                   # the part after '@' in "qwen-plus@Tongyi-Qianwen"
        base_url: https://dashscope.aliyuncs.com/compatible-mode/v1
        api_key_env: DASHSCOPE_API_KEY                  # or api_key: sk-... (prefer the env var)
        open: true                                      # any "<name>@Tongyi-Qianwen" goes to this endpoint
        models:                                         # declare types and upstream names where needed
          qwen-plus: {}                                 # a chat model
          text-embedding-v3: {type: embedding}
          gte-rerank: {type: rerank, model: gte-rerank-v2}   # served by the endpoint's /rerank route
      DeepSeek:
        base_url: https://api.deepseek.com/v1
        api_key_env: DEEPSEEK_API_KEY
        stream: true            # false: ask for whole answers (servers that cannot stream)
        stream_usage: true      # false: don't send stream_options (servers that reject it)

An "open" factory passes any model name through (upstream name = the id's first '@' segment, so RAGFlow's
"deepseek-v4-pro@default@DeepSeek" asks for "deepseek-v4-pro"); a closed one knows only its `models`.

For one of RAGFlow's factories that factories.py knows (DeepSeek, Moonshot, Tongyi-Qianwen...), `base_url`
may be left out (RAGFlow's endpoint is used) and so may the key (its `<FACTORY>_API_KEY`, e.g.
DASHSCOPE_API_KEY, is read when set). A factory declared here replaces that factory's environment settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from services.llm_gateway import factories as known_factories


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Model):
    type: Literal["chat", "embedding", "rerank"] = "chat"
    model: str = ""  # the endpoint's name for it; default: the name in the id


class FactorySpec(_Model):
    base_url: str = ""
    api_key: str = ""
    api_key_env: str = ""
    open: bool = True
    stream: bool = True
    stream_usage: bool = True
    models: dict[str, ModelSpec] = Field(default_factory=dict)

    @field_validator("models", mode="before")
    @classmethod
    def _empty_specs(cls, value: Any) -> Any:
        # `qwen-plus:` with nothing after it in YAML is None: a chat model with default settings.
        if isinstance(value, dict):
            return {k: (v if v is not None else {}) for k, v in value.items()}
        return value


class ProvidersFile(_Model):
    default_chat_model: str = ""
    default_embedding_model: str = ""
    default_rerank_model: str = ""
    factories: dict[str, FactorySpec] = Field(default_factory=dict)


def describe(exc: ValidationError) -> str:
    """Each problem as `field.path: message`, so a bad file says where it is wrong."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])


def load_providers_file(path: Path, environ: Mapping[str, str]) -> ProvidersFile:
    """Parse and check the file; `api_key_env` names are looked up in `environ` now, so a missing key fails at start."""
    where = f"TRELLIS_LLM_PROVIDERS={path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise SystemExit(f"llm_gateway: cannot read {where}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SystemExit(f"llm_gateway: {where} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    try:
        spec = ProvidersFile.model_validate(data or {})
    except ValidationError as exc:
        raise SystemExit(f"llm_gateway: {where}: {describe(exc)}") from None
    factories = {}
    for name, f in spec.factories.items():
        if "@" in name:
            raise SystemExit(f"llm_gateway: {where}: factories.{name}: a factory name cannot contain '@'")
        if f.api_key_env:
            if not environ.get(f.api_key_env):
                raise SystemExit(f"llm_gateway: {where}: factories.{name}.api_key_env: {f.api_key_env} is not set")
            f = f.model_copy(update={"api_key": environ[f.api_key_env]})
        known = known_factories.find(name)
        if known is not None and not f.api_key and environ.get(known.key_env):
            f = f.model_copy(update={"api_key": environ[known.key_env]})
        factories[name] = f
    return spec.model_copy(update={"factories": factories})
