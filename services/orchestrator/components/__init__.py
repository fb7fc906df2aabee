"""Component registry: one module per component, imported explicitly below.

`get_class(name)` returns the class registered under RAGFlow's `component_name`; an unknown name
raises `UnknownComponent` listing the known ones. Names in `PENDING` are real RAGFlow components whose
issue has not landed yet: validation reports "component X is not available yet" for them.
"""
from __future__ import annotations

import importlib
import logging

from .base import (Component, NodeContext, Route, RunEnv, UnknownComponent, get_class, register,
                   registered)

log = logging.getLogger(__name__)

# Explicit list (STYLE.md section 7). Modules written in parallel by other engineers are listed in
# _OPTIONAL until they exist; the lead moves them into _MODULES when they land.
_MODULES = ("begin", "message", "switch", "iteration", "iteration_item", "loop", "loop_item",
            "exit_loop")
_OPTIONAL = ("variable_assigner", "variable_aggregator", "string_transform", "data_operations",
             "list_operations", "invoke")

for _name in _MODULES:
    importlib.import_module(f"{__name__}.{_name}")
for _name in _OPTIONAL:
    try:
        importlib.import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as exc:  # only a missing module is tolerated, not a broken one
        if exc.name != f"{__name__}.{_name}":
            raise
        log.debug("component module %s not present yet", _name)

# RAGFlow components and tools that come with later issues (agent/component, agent/tools, rag/flow).
PENDING = frozenset({
    "LLM", "Agent", "Categorize", "Retrieval", "CodeExec", "UserFillUp", "DocGenerator",
    "ExcelProcessor", "Browser", "ExeSQL", "TavilySearch", "TavilyExtract", "Google", "GoogleScholar",
    "DuckDuckGo", "Wikipedia", "PubMed", "ArXiv", "GitHub", "SearXNG", "KeenableSearch", "BGPT",
    "QueritSearch", "QueritContents", "Crawler", "DeepL", "QWeather", "AkShare", "WenCai",
    "YahooFinance", "Email", "Jin10", "TuShare", "Bing",
    "VariableAssigner", "VariableAggregator", "StringTransform", "DataOperations",
    "ListOperations", "Invoke",
})


def is_available(name: str) -> bool:
    return name in registered()


def is_known(name: str) -> bool:
    return name in registered() or name in PENDING


__all__ = ["PENDING", "Component", "NodeContext", "Route", "RunEnv", "UnknownComponent",
           "get_class", "is_available", "is_known", "register", "registered"]
