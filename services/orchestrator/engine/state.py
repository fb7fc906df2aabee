"""Run state that RAGFlow keeps inside the DSL, split off: it belongs to the session, never the DSL.

`SessionState` holds `globals` (sys.* and env.*), `history`, `path`, `retrieval` and `memory`; the
orchestrator stores it per session (Redis) and passes it to every run of that session.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

# Declared variable type -> value when `variables[name].value` is null (RAGFlow Canvas.reset()).
_TYPE_DEFAULTS: dict[str, Any] = {
    "string": "", "number": 0, "boolean": False, "object": {},
}

RUN_STATE_KEYS = ("globals", "history", "path", "retrieval", "memory")


def default_for_type(type_name: str | None) -> Any:
    t = (type_name or "").lower()
    if t.startswith("array"):
        return []
    return copy.deepcopy(_TYPE_DEFAULTS.get(t, ""))


def sys_defaults() -> dict[str, Any]:
    return {"sys.query": "", "sys.user_id": "", "sys.conversation_turns": 0, "sys.files": [],
            "sys.history": [], "sys.date": ""}


def env_from_variables(variables: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(variables, Mapping):
        return out
    for name, decl in variables.items():
        if isinstance(decl, dict):
            value = decl.get("value")
            out[f"env.{name}"] = default_for_type(decl.get("type")) if value is None else copy.deepcopy(value)
        else:
            out[f"env.{name}"] = decl
    return out


@dataclass(slots=True)
class SessionState:
    globals: dict[str, Any] = field(default_factory=dict)
    history: list[Any] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    retrieval: list[Any] = field(default_factory=list)
    memory: list[Any] = field(default_factory=list)
    # Which run-state keys a loaded v1 DSL carried (so v2 -> v1 can write exactly those back).
    present: tuple[str, ...] = RUN_STATE_KEYS

    @classmethod
    def fresh(cls, variables: Any = None) -> SessionState:
        return cls(globals={**sys_defaults(), **env_from_variables(variables or {})})

    @classmethod
    def from_v1(cls, dsl: Mapping[str, Any]) -> SessionState:
        """Take the run state out of a v1 DSL (deep copies; absent keys get defaults)."""
        present = tuple(k for k in RUN_STATE_KEYS if k in dsl)
        g = dsl.get("globals")
        retrieval = dsl.get("retrieval")
        return cls(
            globals=copy.deepcopy(g) if isinstance(g, dict) else {
                **sys_defaults(), **env_from_variables(dsl.get("variables") or {})},
            history=copy.deepcopy(dsl.get("history") or []),
            path=list(dsl.get("path") or []),
            # Old examples store a dict here; RAGFlow replaces it on reset. Keep it verbatim.
            retrieval=copy.deepcopy(retrieval) if retrieval is not None else [],
            memory=copy.deepcopy(dsl.get("memory") or []),
            present=present,
        )

    def to_v1(self) -> dict[str, Any]:
        full = {"globals": self.globals, "history": self.history, "path": self.path,
                "retrieval": self.retrieval, "memory": self.memory}
        return {k: copy.deepcopy(full[k]) for k in self.present}

    def prepare_run(self, request: RunRequest, variables: Any) -> None:
        """RAGFlow run-loop steps 1-5: sys.* from the request, turns += 1, history, env defaults."""
        g = self.globals
        for k, v in sys_defaults().items():
            g.setdefault(k, v)
        for k, v in env_from_variables(variables).items():
            g.setdefault(k, v)
        g["sys.query"] = request.query
        g["sys.user_id"] = request.user_id
        g["sys.files"] = list(request.files)
        g["sys.date"] = time.strftime("%Y-%m-%d %H:%M:%S")
        if request.chat_template_kwargs is not None:
            g["sys.chat_template_kwargs"] = request.chat_template_kwargs
        g["sys.conversation_turns"] = int(g.get("sys.conversation_turns") or 0) + 1
        if request.query:
            self.history.append(["user", request.query])
            hist = g.get("sys.history")
            g["sys.history"] = [*(hist if isinstance(hist, list) else []), f"user: {request.query}"]
        if not isinstance(self.retrieval, list):
            self.retrieval = []
        self.retrieval.append({"chunks": {}, "doc_aggs": {}})

    def add_assistant_message(self, content: str) -> None:
        self.history.append(["assistant", content])
        hist = self.globals.get("sys.history")
        self.globals["sys.history"] = [*(hist if isinstance(hist, list) else []), f"assistant: {content}"]


@dataclass(slots=True)
class RunRequest:
    run_id: str
    session_id: str = ""
    query: str = ""
    # RAGFlow API shape {"var": {"type": "line", "value": ...}} or plain {"var": value}.
    inputs: dict[str, Any] = field(default_factory=dict)
    files: list[Any] = field(default_factory=list)
    user_id: str = ""
    chat_template_kwargs: dict[str, Any] | None = None
    webhook_payload: dict[str, Any] | None = None
    # Per-run overrides, never written to the DSL: "llm_id", "system_prompt",
    # "enabled_tools" (list of tool names), "attachments" (list of texts or {"name", "content"}).
    # Read by the LLM, Agent and Categorize components (components/_llm.py).
    overrides: dict[str, Any] = field(default_factory=dict)
    # The tenant the run belongs to: components that call tenant-scoped services (Retrieval) pass it on.
    tenant_id: str = ""
    # RAGFlow's `custom_header` of the request: extra HTTP headers for the MCP servers an Agent calls.
    custom_header: dict[str, Any] = field(default_factory=dict)
