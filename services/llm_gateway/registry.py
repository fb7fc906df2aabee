"""Model resolution: a RAGFlow model id -> (provider, the provider's model name).

Ids (case-insensitive):
- "name@Factory": a declared model with exactly that id, else any name under an *open* factory (one that
  passes names through: the OPENAI_BASE_URL endpoint as "OpenAI", and providers-file factories with
  `open: true`). The factory is the part after the last '@' (RAGFlow also writes "name@default@Factory").
- "name": the one declared model of that name and type, else the OPENAI_BASE_URL endpoint when configured.
- "": the default model of the type (TRELLIS_DEFAULT_CHAT_MODEL / TRELLIS_DEFAULT_EMBEDDING_MODEL).
Anything else is NOT_FOUND, naming the id and what would configure it (factories.py knows the env names of
RAGFlow's factories). With the fallback on (TRELLIS_MODEL_FALLBACK=1), an unresolvable *chat* id runs on the
default chat model instead, and the result's `notice` says so (the run's events carry it to the client).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from services.common.errors import InvalidArgument
from services.llm_gateway import factories
from services.llm_gateway.errors import ModelNotFound
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.models import ModelType


@dataclass(frozen=True)
class Resolved:
    id: str  # canonical "name@Factory"
    factory: str  # the provider label in errors and metrics
    type: ModelType
    provider: Provider = field(repr=False, compare=False)
    upstream: str  # the name the provider knows the model by
    notice: str = ""  # set when the fallback ran this model in place of one that could not be resolved


@dataclass(frozen=True)
class _Open:
    factory: str
    provider: Provider


class Registry:
    def __init__(self) -> None:
        self._models: dict[str, Resolved] = {}
        self._open: dict[str, _Open] = {}
        self._bare: _Open | None = None
        self._defaults: dict[ModelType, str] = {}
        self.providers: list[Provider] = []
        self.fallback = False  # TRELLIS_MODEL_FALLBACK: unresolvable chat ids run on the default chat model

    # -- building -------------------------------------------------------------------------------------
    def add_provider(self, provider: Provider) -> None:
        if provider not in self.providers:
            self.providers.append(provider)

    def add_model(self, name: str, factory: str, type: ModelType, provider: Provider, upstream: str = "") -> Resolved:
        self.add_provider(provider)
        entry = Resolved(f"{name}@{factory}", factory, type, provider, upstream or name)
        self._models[entry.id.lower()] = entry
        return entry

    def add_open_factory(self, factory: str, provider: Provider, *, bare_names: bool = False) -> None:
        """Any "<name>@<factory>" resolves to `provider`; with `bare_names`, so does any unknown bare name."""
        self.add_provider(provider)
        self._open[factory.lower()] = _Open(factory, provider)
        if bare_names:
            self._bare = _Open(factory, provider)

    def set_default(self, type: ModelType, model_id: str) -> None:
        """Checked now, so a default that names nothing fails at start-up, not on the first request."""
        if model_id:
            self.resolve(model_id, type)
        self._defaults[type] = model_id

    # -- resolving ------------------------------------------------------------------------------------
    def default(self, type: ModelType) -> str:
        return self._defaults.get(type, "")

    def resolve(self, model_id: str, type: ModelType) -> Resolved:
        wanted = model_id.strip()
        if not wanted:
            wanted = self.default(type)
            if not wanted:
                env = {"chat": "TRELLIS_DEFAULT_CHAT_MODEL", "embedding": "TRELLIS_DEFAULT_EMBEDDING_MODEL"}.get(type, "")
                raise ModelNotFound(f"no default {type} model is configured" + (f" (set {env})" if env else ""))
        found = self._find(wanted, type)
        if found is None:
            if self.fallback and type == "chat" and self.default("chat") and wanted != self.default("chat"):
                problem = self._missing(wanted, type, hint_fallback=False)
                default = self.resolve(self.default("chat"), "chat")
                notice = (f"model {wanted!r} is not configured ({problem}); it ran on the default chat model "
                          f"{default.id} because TRELLIS_MODEL_FALLBACK=1")
                return replace(default, notice=notice)
            raise ModelNotFound(f"unknown {type} model {wanted!r}: {self._missing(wanted, type)}")
        if found.type != type:
            raise InvalidArgument(f"model {wanted!r} is a {found.type} model; this call needs a {type} model")
        return found

    def _find(self, wanted: str, type: ModelType) -> Resolved | None:
        exact = self._models.get(wanted.lower())
        if exact is not None:
            return exact
        if "@" in wanted:
            factory = wanted.rsplit("@", 1)[1]
            name = factories.upstream_name(wanted)
            open_ = self._open.get(factory.lower())
            if open_ is None or not name:
                return None
            return Resolved(f"{name}@{open_.factory}", open_.factory, type, open_.provider, name)
        same_name = [m for m in self._models.values() if m.id.rsplit("@", 1)[0].lower() == wanted.lower()]
        typed = [m for m in same_name if m.type == type]
        if len(typed) == 1:
            return typed[0]
        if len(typed) > 1:
            raise InvalidArgument(
                f"model name {wanted!r} is ambiguous: {', '.join(sorted(m.id for m in typed))}; add '@Factory'"
            )
        if self._bare is not None:
            return Resolved(f"{wanted}@{self._bare.factory}", self._bare.factory, type, self._bare.provider, wanted)
        return same_name[0] if same_name else None

    def _known(self, type: ModelType) -> str:
        ids = sorted(m.id for m in self._models.values() if m.type == type)
        ids += [f"<any>@{o.factory}" for o in self._open.values()]
        return ", ".join(ids) or "none"

    def _missing(self, wanted: str, type: ModelType, *, hint_fallback: bool = True) -> str:
        """Why `wanted` names nothing, and what would configure it."""
        file_hint = "or declare it in the providers file (TRELLIS_LLM_PROVIDERS)"
        fallback_hint = ("; TRELLIS_MODEL_FALLBACK=1 runs it on the default chat model"
                         if type == "chat" and hint_fallback else "")
        if "@" not in wanted:
            return (f"no configured model has that name (known: {self._known(type)}); name its factory as "
                    f"'{wanted}@Factory', set OPENAI_BASE_URL for an endpoint that takes bare names, "
                    f"{file_hint}{fallback_hint}")
        factory_name = wanted.rsplit("@", 1)[1]
        if factory_name.lower() in self._open or any(m.factory.lower() == factory_name.lower()
                                                      for m in self._models.values()):
            return (f"factory {factory_name} is configured but declares no such {type} model "
                    f"(known: {self._known(type)}); add it to the factory's `models` in the providers file "
                    f"or make the factory `open: true`{fallback_hint}")
        known = factories.find(factory_name)
        if known is None:
            return (f"{factory_name!r} is not one of RAGFlow's OpenAI-compatible factories that Trellis knows "
                    f"(docs/models.md lists them); declare it with its base_url in the providers file "
                    f"(TRELLIS_LLM_PROVIDERS){fallback_hint}")
        return f"factory {known.name} is not configured: {known.how_to_configure()}, {file_hint}{fallback_hint}"

    # -- listing ----------------------------------------------------------------------------------------
    def models(self) -> list[tuple[Resolved, bool]]:
        """Declared models with whether each is its type's default, in a stable order."""
        defaults = {t: self._find(i, t) for t, i in self._defaults.items() if i}
        return [
            (m, defaults.get(m.type) is not None and defaults[m.type].id == m.id)  # type: ignore[union-attr]
            for m in sorted(self._models.values(), key=lambda m: (m.type, m.id.lower()))
        ]

    def open_factories(self) -> list[str]:
        return sorted(o.factory for o in self._open.values())

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()
