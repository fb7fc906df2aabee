"""LLM gateway settings, read once at start-up (docs/adding-a-service.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from services.common.config import ServerConfig, env_bool, env_float, env_int, env_policy, env_str
from services.common.speed_policies import DEFAULT_STREAM_PACING, STREAM_PACINGS, StreamPacing, stream_pacing
from services.llm_gateway import factories
from services.llm_gateway.providers_file import ProvidersFile, load_providers_file


@dataclass(frozen=True)
class LlmGatewayConfig:
    server: ServerConfig  # TRELLIS_LLM_GATEWAY_PORT (50052), TRELLIS_LLM_GATEWAY_METRICS_PORT (9092)
    providers: ProvidersFile | None = None  # TRELLIS_LLM_PROVIDERS: path of the providers file (providers_file.py)
    scripts_file: Path | None = None  # TRELLIS_LLM_SCRIPTS: script book of the scripted provider (providers/scripted.py)
    default_chat_model: str = ""  # TRELLIS_DEFAULT_CHAT_MODEL: what "" means for chat; default the file's, else local
    default_embedding_model: str = ""  # TRELLIS_DEFAULT_EMBEDDING_MODEL: same for embeddings
    openai_base_url: str = ""  # OPENAI_BASE_URL: an OpenAI-compatible endpoint, registered as the open factory "OpenAI"
    openai_api_key: str = ""  # OPENAI_API_KEY
    # <FACTORY>_API_KEY / <FACTORY>_BASE_URL (factories.py)
    factory_endpoints: dict[str, factories.Endpoint] = field(default_factory=dict)
    model_fallback: bool = False  # TRELLIS_MODEL_FALLBACK: unresolvable chat model ids run on the default chat model
    local_enabled: bool = True  # TRELLIS_LLM_LOCAL: offer the bundled local models (loaded on first use)
    local_threads: int = 2  # TRELLIS_LLM_LOCAL_THREADS: CPU threads for local chat inference
    local_context: int = 4096  # TRELLIS_LLM_LOCAL_CONTEXT: local chat context window in tokens
    local_queue: int = 8  # TRELLIS_LLM_LOCAL_QUEUE: requests that may wait per local model; beyond: RESOURCE_EXHAUSTED
    timeout_s: float = 300.0  # TRELLIS_LLM_TIMEOUT_S: budget of a call whose caller set no deadline
    stream_idle_s: float = 60.0  # TRELLIS_LLM_STREAM_IDLE_S: a stream silent this long fails DEADLINE_EXCEEDED
    # TRELLIS_LLM_STREAM_PACING: how chat streams pace their messages under load, `linger_under_load` or
    # `immediate` (services/common/speed_policies.py, docs/speed-policies.md)
    stream_pacing: StreamPacing = STREAM_PACINGS[DEFAULT_STREAM_PACING]
    max_attempts: int = 3  # TRELLIS_LLM_MAX_ATTEMPTS: tries per call for retryable provider errors
    backoff_s: float = 0.5  # TRELLIS_LLM_BACKOFF_S: first retry delay; doubles per try, with jitter
    backoff_max_s: float = 8.0  # TRELLIS_LLM_BACKOFF_MAX_S: longest retry delay

    @classmethod
    def from_env(cls) -> "LlmGatewayConfig":
        providers_path = env_str("TRELLIS_LLM_PROVIDERS", "")
        scripts_path = env_str("TRELLIS_LLM_SCRIPTS", "")
        return cls(
            server=ServerConfig.from_env("llm_gateway"),
            providers=load_providers_file(Path(providers_path), os.environ) if providers_path else None,
            scripts_file=Path(scripts_path) if scripts_path else None,
            default_chat_model=env_str("TRELLIS_DEFAULT_CHAT_MODEL", cls.default_chat_model),
            default_embedding_model=env_str("TRELLIS_DEFAULT_EMBEDDING_MODEL", cls.default_embedding_model),
            openai_base_url=env_str("OPENAI_BASE_URL", cls.openai_base_url),
            openai_api_key=env_str("OPENAI_API_KEY", cls.openai_api_key),
            factory_endpoints=factories.configured(os.environ),
            model_fallback=env_bool("TRELLIS_MODEL_FALLBACK", cls.model_fallback),
            local_enabled=env_bool("TRELLIS_LLM_LOCAL", cls.local_enabled),
            local_threads=env_int("TRELLIS_LLM_LOCAL_THREADS", cls.local_threads),
            local_context=env_int("TRELLIS_LLM_LOCAL_CONTEXT", cls.local_context),
            local_queue=env_int("TRELLIS_LLM_LOCAL_QUEUE", cls.local_queue),
            timeout_s=env_float("TRELLIS_LLM_TIMEOUT_S", cls.timeout_s),
            stream_idle_s=env_float("TRELLIS_LLM_STREAM_IDLE_S", cls.stream_idle_s),
            stream_pacing=env_policy(stream_pacing),  # an unknown name stops start-up, naming the known ones
            max_attempts=max(1, env_int("TRELLIS_LLM_MAX_ATTEMPTS", cls.max_attempts)),
            backoff_s=env_float("TRELLIS_LLM_BACKOFF_S", cls.backoff_s),
            backoff_max_s=env_float("TRELLIS_LLM_BACKOFF_MAX_S", cls.backoff_max_s),
        )

    @classmethod
    def for_tests(cls, **overrides: object) -> "LlmGatewayConfig":
        """The field defaults with no environment read, the local models off and quick timeouts and retries;
        override what a test needs."""
        values: dict[str, object] = dict(
            server=ServerConfig.for_tests("llm_gateway"),
            local_enabled=False,
            local_context=2048,
            local_queue=4,
            timeout_s=30.0,
            stream_idle_s=30.0,
            backoff_s=0.01,
            backoff_max_s=0.1,
        )
        return cls(**{**values, **overrides})  # type: ignore[arg-type]
