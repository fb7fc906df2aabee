"""Model providers, one file each, behind `base.Provider`: openai (any OpenAI-compatible endpoint),
local (bundled SmolLM2 + all-MiniLM-L6-v2), scripted (deterministic, for tests and demos).

The kinds a providers-file factory may name register themselves with `base.register` when imported.
"""
from __future__ import annotations

import importlib

from .base import ModelSpec, Provider, ProviderSettings, UnknownKind, get_kind, register

# Explicit list: adding a provider kind = one module + one name here (docs/adding-a-provider.md).
_MODULES = ("openai",)

for _name in _MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["ModelSpec", "Provider", "ProviderSettings", "UnknownKind", "get_kind", "register"]
