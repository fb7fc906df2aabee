"""LLM gateway settings, read once at start-up (STYLE.md section 4)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from services.common.config import DEFAULT_PORTS, ServerConfig, env_bool, env_float, env_int, env_str
from services.llm_gateway import factories
from services.llm_gateway.providers_file import ProvidersFile, load_providers_file


@dataclass(frozen=True)
class LlmGatewayConfig:
    server: ServerConfig  # TRELLIS_LLM_GATEWAY_PORT (50052), TRELLIS_LLM_GATEWAY_METRICS_PORT (9092)
    providers: ProvidersFile | None  # TRELLIS_LLM_PROVIDERS: path of the providers file (providers_file.py)
    scripts_file: Path | None  # TRELLIS_LLM_SCRIPTS: script book of the scripted provider (providers/scripted.py)
    default_chat_model: str  # TRELLIS_DEFAULT_CHAT_MODEL: what "" means for chat; default the file's, else local
    default_embedding_model: str  # TRELLIS_DEFAULT_EMBEDDING_MODEL: same for embeddings
    openai_base_url: str  # OPENAI_BASE_URL: an OpenAI-compatible endpoint, registered as the open factory "OpenAI"
    openai_api_key: str  # OPENAI_API_KEY
    factory_endpoints: dict[str, factories.Endpoint]  # <FACTORY>_API_KEY / <FACTORY>_BASE_URL (factories.py)
    model_fallback: bool  # TRELLIS_MODEL_FALLBACK: unresolvable chat model ids run on the default chat model
    local_enabled: bool  # TRELLIS_LLM_LOCAL: offer the bundled local models (default on; loaded on first use)
    local_threads: int  # TRELLIS_LLM_LOCAL_THREADS: CPU threads for local chat inference (default 2)
    local_context: int  # TRELLIS_LLM_LOCAL_CONTEXT: local chat context window in tokens (default 4096)
    local_queue: int  # TRELLIS_LLM_LOCAL_QUEUE: requests that may wait per local model; beyond: RESOURCE_EXHAUSTED
    timeout_s: float  # TRELLIS_LLM_TIMEOUT_S: budget of a call whose caller set no deadline (default 300)
    stream_idle_s: float  # TRELLIS_LLM_STREAM_IDLE_S: a stream silent this long fails DEADLINE_EXCEEDED (60)
    max_attempts: int  # TRELLIS_LLM_MAX_ATTEMPTS: tries per call for retryable provider errors (default 3)
    backoff_s: float  # TRELLIS_LLM_BACKOFF_S: first retry delay; doubles per try, with jitter (default 0.5)
    backoff_max_s: float  # TRELLIS_LLM_BACKOFF_MAX_S: longest retry delay (default 8)

    @classmethod
    def from_env(cls) -> "LlmGatewayConfig":
        port, metrics_port = DEFAULT_PORTS["llm_gateway"]
        providers_path = env_str("TRELLIS_LLM_PROVIDERS", "")
        scripts_path = env_str("TRELLIS_LLM_SCRIPTS", "")
        return cls(
            server=ServerConfig.from_env("llm_gateway", port, metrics_port),
            providers=load_providers_file(Path(providers_path), os.environ) if providers_path else None,
            scripts_file=Path(scripts_path) if scripts_path else None,
            default_chat_model=env_str("TRELLIS_DEFAULT_CHAT_MODEL", ""),
            default_embedding_model=env_str("TRELLIS_DEFAULT_EMBEDDING_MODEL", ""),
            openai_base_url=env_str("OPENAI_BASE_URL", ""),
            openai_api_key=env_str("OPENAI_API_KEY", ""),
            factory_endpoints=factories.configured(os.environ),
            model_fallback=env_bool("TRELLIS_MODEL_FALLBACK", False),
            local_enabled=env_bool("TRELLIS_LLM_LOCAL", True),
            local_threads=env_int("TRELLIS_LLM_LOCAL_THREADS", 2),
            local_context=env_int("TRELLIS_LLM_LOCAL_CONTEXT", 4096),
            local_queue=env_int("TRELLIS_LLM_LOCAL_QUEUE", 8),
            timeout_s=env_float("TRELLIS_LLM_TIMEOUT_S", 300.0),
            stream_idle_s=env_float("TRELLIS_LLM_STREAM_IDLE_S", 60.0),
            max_attempts=max(1, env_int("TRELLIS_LLM_MAX_ATTEMPTS", 3)),
            backoff_s=env_float("TRELLIS_LLM_BACKOFF_S", 0.5),
            backoff_max_s=env_float("TRELLIS_LLM_BACKOFF_MAX_S", 8.0),
        )

    @classmethod
    def for_tests(cls, **overrides: object) -> "LlmGatewayConfig":
        """Defaults with no environment read and the local models off; override what a test needs."""
        values: dict[str, object] = dict(
            server=ServerConfig("llm_gateway", "127.0.0.1", 0, 0, 1.0, 0.0),
            providers=None,
            scripts_file=None,
            default_chat_model="",
            default_embedding_model="",
            openai_base_url="",
            openai_api_key="",
            factory_endpoints={},
            model_fallback=False,
            local_enabled=False,
            local_threads=2,
            local_context=2048,
            local_queue=4,
            timeout_s=30.0,
            stream_idle_s=30.0,
            max_attempts=3,
            backoff_s=0.01,
            backoff_max_s=0.1,
        )
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
