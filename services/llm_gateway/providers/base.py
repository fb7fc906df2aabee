"""The provider interface: one class per provider kind, one file each (docs/adding-a-provider.md).

A kind that the providers file can name (`kind: <name>` in a factory's entry) is registered with
`@register`: its `Settings` (a pydantic model, a subclass of `ProviderSettings`) is validated from that
entry and `from_spec(factory, settings)` builds the provider. `providers/__init__.py` imports the modules.

A provider only talks to its model. Resolution, deadlines, retries and metrics live in the gateway
(`gateway.py`), so every provider gets them the same way. What a provider must do itself:
- raise the errors of `errors.py` with the provider's own message (retryable ones marked so);
- stop its upstream work at once when the task consuming `stream()` is cancelled (close the HTTP response,
  tell the inference thread to stop), because that is how a client cancel or a deadline reaches it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, ClassVar, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.llm_gateway.errors import ModelUnavailable
from services.llm_gateway.models import ChatCall, ChatDelta, Embeddings, RerankScore


class ModelSpec(BaseModel):
    """One model a factory declares in the providers file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["chat", "embedding", "rerank"] = "chat"
    model: str = ""  # the endpoint's name for it; default: the name in the id


class ProviderSettings(BaseModel):
    """A providers-file factory's entry: the keys every kind shares. A kind's `Settings` adds its own, and
    sets `kind` to a `Literal` of its name defaulting to it (`register` checks)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str = "openai"  # which registered provider class serves the factory
    open: bool = True  # any "<name>@<Factory>" goes to this provider; false: only `models`
    models: dict[str, ModelSpec] = Field(default_factory=dict)

    @field_validator("models", mode="before")
    @classmethod
    def _empty_specs(cls, value: Any) -> Any:
        # `qwen-plus:` with nothing after it in YAML is None: a chat model with default settings.
        if isinstance(value, dict):
            return {k: (v if v is not None else {}) for k, v in value.items()}
        return value

    def with_environment(self, factory: str, environ: Mapping[str, str]) -> "ProviderSettings":
        """These settings completed from the environment at load time (e.g. a key named by `api_key_env`).
        A problem raises `ValueError("<field>: <message>")`."""
        return self


class Provider(ABC):
    kind: ClassVar[str]  # "openai", "local", "scripted"
    Settings: ClassVar[type[ProviderSettings]] = ProviderSettings  # its providers-file entry (registered kinds)

    @classmethod
    def from_spec(cls, factory: str, settings: ProviderSettings) -> "Provider":
        """The provider serving the providers file's factory `factory` (registered kinds implement it)."""
        raise NotImplementedError(f"{cls.__name__} cannot be configured from the providers file")

    @abstractmethod
    def stream(self, call: ChatCall, *, timeout: float) -> AsyncIterator[ChatDelta]:
        """One assistant turn as deltas; the last one carries the finish reason (and usage when known)."""

    async def embed(self, model: str, texts: Sequence[str], *, timeout: float) -> Embeddings:
        raise ModelUnavailable(f"{self.kind} provider has no embedding models")

    def has_rerank(self, model: str) -> bool:
        """Whether `rerank()` can score with this model; otherwise the gateway ranks by embedding similarity."""
        return False

    async def rerank(
        self, model: str, query: str, documents: Sequence[str], *, top_n: int, timeout: float
    ) -> list[RerankScore]:
        raise ModelUnavailable(f"{self.kind} provider has no rerank models")

    async def aclose(self) -> None:
        """Release clients, threads and models. Idempotent."""


_KINDS: dict[str, type[Provider]] = {}


class UnknownKind(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown provider kind '{name}' (known: {', '.join(sorted(_KINDS))})")

    def __str__(self) -> str:
        return str(self.args[0])


def register(cls: type[Provider]) -> type[Provider]:
    """Class decorator: the providers file may name `cls.kind`."""
    declared = cls.Settings.model_fields["kind"].default
    if declared != cls.kind:
        raise TypeError(f"{cls.__name__}.Settings.kind defaults to {declared!r}, not its kind {cls.kind!r}")
    _KINDS[cls.kind] = cls
    return cls


def get_kind(name: str) -> type[Provider]:
    try:
        return _KINDS[name]
    except KeyError:
        raise UnknownKind(name) from None
