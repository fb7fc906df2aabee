"""Component registry: one module per component, imported explicitly below.

`get_class(name)` returns the class registered under RAGFlow's `component_name`; an unknown name
raises `UnknownComponent` listing the known ones. Names in `PENDING` are real RAGFlow components not
implemented here yet: validation reports "component X is not available yet" for them.
"""
from __future__ import annotations

import importlib

from services.orchestrator.components.base import (
    Component,
    NodeContext,
    Pause,
    Route,
    RunEnv,
    UnknownComponent,
    get_class,
    register,
    registered,
)

# Explicit list: adding a component = one module + one name here (docs/adding-a-component.md).
_MODULES = ("begin", "message", "switch", "iteration", "iteration_item", "loop", "loop_item",
            "exit_loop", "variable_assigner", "variable_aggregator", "string_transform",
            "data_operations", "list_operations", "invoke", "retrieval", "doc_generator", "excel_processor",
            "browser", "a2a_agent", "agent_call",
            "llm", "agent", "categorize", "code_exec", "exesql", "user_fill_up",
            "tools.tavily", "tools.google", "tools.bing", "tools.duckduckgo", "tools.wikipedia",
            "tools.yahoofinance", "tools.searxng", "tools.github", "tools.arxiv", "tools.pubmed",
            "tools.bgpt", "tools.keenable", "tools.querit", "tools.deepl", "tools.qweather",
            "tools.email", "tools.crawler", "tools.googlescholar",
            "tools.akshare", "tools.tushare", "tools.jin10", "tools.wencai")

for _name in _MODULES:
    importlib.import_module(f"{__name__}.{_name}")

# RAGFlow components and tools (agent/component, agent/tools, rag/flow) not implemented here yet.
PENDING: frozenset[str] = frozenset()  # none left


def is_available(name: str) -> bool:
    return name in registered()


def is_known(name: str) -> bool:
    return name in registered() or name in PENDING


__all__ = ["PENDING", "Component", "NodeContext", "Pause", "Route", "RunEnv", "UnknownComponent",
           "get_class", "is_available", "is_known", "register", "registered"]
