"""The params every component that calls a chat model reads (LLM, Agent, Categorize): `LlmParams`.

RAGFlow fills defaults, so only types are checked. The model's sampling values (`temperature`, `top_p`,
...) are sent only when their UI flag (`temperatureEnabled`...) is on: `_llm.ModelConf.of` reads them.
"""
from __future__ import annotations

from typing import Any, Literal

from services.orchestrator.components.params import Entry, Number, Params, TextOr


class Prompt(Entry):
    role: Literal["system", "user", "assistant"] = "user"
    content: str = ""


class LlmParams(Params):
    llm_id: Any = None
    sys_prompt: str = ""
    prompts: TextOr(list[Prompt] | None) = None  # type: ignore[valid-type]  # a string is one user prompt
    max_tokens: Number(ge=0, integer=True) = None  # type: ignore[valid-type]
    message_history_window_size: Number(ge=0, integer=True) = None  # type: ignore[valid-type]
    temperature: Number(ge=0, blank=True) = None  # type: ignore[valid-type]
    top_p: Number(ge=0, blank=True) = None  # type: ignore[valid-type]
    presence_penalty: Number(ge=0, blank=True) = None  # type: ignore[valid-type]
    frequency_penalty: Number(ge=0, blank=True) = None  # type: ignore[valid-type]
    # the UI flags that switch each sampling value on (RAGFlow's gen_conf)
    temperatureEnabled: Any = None  # noqa: N815
    topPEnabled: Any = None  # noqa: N815
    presencePenaltyEnabled: Any = None  # noqa: N815
    frequencyPenaltyEnabled: Any = None  # noqa: N815
    maxTokensEnabled: Any = None  # noqa: N815
    cite: Any = True  # add the citation prompt once the run holds retrieved chunks
    outputs: Any = None  # `outputs.structured`: the JSON schema of a structured answer
