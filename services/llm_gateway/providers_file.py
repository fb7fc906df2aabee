"""The providers file (`TRELLIS_LLM_PROVIDERS`, YAML or JSON): RAGFlow factories -> model providers.

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

Each factory names its provider `kind` (default `openai`, an OpenAI-compatible endpoint; its keys are
`OpenAISettings` in providers/openai.py). `open` and `models` are every kind's (`ProviderSettings` in
providers/base.py); the other keys are the kind's own `Settings`, checked when the file is read, so an error
names the factory and the key (`factories.DeepSeek.stream: ...`).

An "open" factory passes any model name through (upstream name = the id's first '@' segment, so RAGFlow's
"deepseek-v4-pro@default@DeepSeek" asks for "deepseek-v4-pro"); a closed one knows only its `models`.

For one of RAGFlow's factories that factories.py knows (DeepSeek, Moonshot, Tongyi-Qianwen...), `base_url`
may be left out (RAGFlow's endpoint is used) and so may the key (its `<FACTORY>_API_KEY`, e.g.
DASHSCOPE_API_KEY, is read when set). A factory declared here replaces that factory's environment settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError

from services.llm_gateway.providers import ProviderSettings, UnknownKind, get_kind

DEFAULT_KIND: str = ProviderSettings.model_fields["kind"].default  # "openai"


class ProvidersFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    default_chat_model: str = ""
    default_embedding_model: str = ""
    default_rerank_model: str = ""
    # Each entry is its kind's `Settings` (parse_factory); given here as built objects.
    factories: dict[str, SerializeAsAny[ProviderSettings]] = Field(default_factory=dict)


def describe(exc: ValidationError, prefix: str = "") -> str:
    """Each problem as `field.path: message`, so a bad file says where it is wrong."""
    return "; ".join(f"{prefix}{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])


def parse_factory(name: str, entry: Any, environ: Mapping[str, str]) -> ProviderSettings:
    """One factory's entry -> its kind's settings, completed from `environ`; a problem raises ValueError
    naming `factories.<name>.<field>`."""
    where = f"factories.{name}"
    if "@" in name:
        raise ValueError(f"{where}: a factory name cannot contain '@'")
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping of settings, got {type(entry).__name__}")
    kind = entry.get("kind", DEFAULT_KIND)
    try:
        cls = get_kind(kind if isinstance(kind, str) else repr(kind))
    except UnknownKind as exc:
        raise ValueError(f"{where}.kind: {exc}") from None
    try:
        settings = cls.Settings.model_validate(entry)
    except ValidationError as exc:
        raise ValueError(describe(exc, f"{where}.")) from None
    try:
        return settings.with_environment(name, environ)
    except ValueError as exc:
        raise ValueError(f"{where}.{exc}") from None


def load_providers_file(path: Path, environ: Mapping[str, str]) -> ProvidersFile:
    """Parse and check the file; keys named in it (`api_key_env`) are looked up in `environ` now, so a missing
    key fails at start."""
    where = f"TRELLIS_LLM_PROVIDERS={path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise SystemExit(f"llm_gateway: cannot read {where}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SystemExit(f"llm_gateway: {where} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    data = dict(data) if isinstance(data, dict) else data
    entries = data.pop("factories") if isinstance(data, dict) and isinstance(data.get("factories"), dict) else {}
    try:
        spec = ProvidersFile.model_validate(data or {})
        factories = {name: parse_factory(str(name), entry, environ) for name, entry in entries.items()}
    except ValidationError as exc:
        raise SystemExit(f"llm_gateway: {where}: {describe(exc)}") from None
    except ValueError as exc:
        raise SystemExit(f"llm_gateway: {where}: {exc}") from None
    return spec.model_copy(update={"factories": factories})
