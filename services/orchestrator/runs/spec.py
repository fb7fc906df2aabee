"""What a Run RPC asked for, free of protobuf; stored with the run so any replica can resume it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class RunSpec:
    tenant_id: str
    run_id: str = ""
    dsl_json: str = ""
    agent_id: str = ""
    version_id: str = ""
    draft: bool = False
    session_id: str = ""
    query: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    files: list[Any] = field(default_factory=list)
    user_id: str = ""
    chat_template_kwargs: dict[str, Any] | None = None
    history: list[tuple[str, str]] = field(default_factory=list)  # (role, content) of a new session
    overrides: dict[str, Any] = field(default_factory=dict)  # llm_id, system_prompt, enabled_tools, attachments
    custom_header: dict[str, Any] = field(default_factory=dict)  # RAGFlow's request `custom_header`: sent to MCP servers
    continue_on_disconnect: bool = False  # keep running when the caller goes away
    create_session: bool = False  # no session_id: make the new session as CreateSession does (source "agent", prologue)
    answer_only: bool = False  # the caller gets only the events an answer is made of (events.ANSWER_EVENTS)
    caller_run_id: str = ""  # a child run (runs/children.py): the run whose AgentCall started it
    call_depth: int = 0  # how many callers above it (runs/children.py refuses runaway nesting)
    webhook_payload: dict[str, Any] | None = None  # RAGFlow's webhook trigger: what Begin in Webhook mode outputs
    # {url, events, secret, source}: POSTed when the run ends (triggers/webhooks_out.py), besides its agent's
    completion_webhook: dict[str, Any] | None = None
    # a busy session: reject, enqueue, interrupt or rollback (runs/admission.py); "" the agent's default
    multitask_strategy: str = ""
    interrupt_id: str = ""  # "<run id>:<component>": these inputs answer that interrupt, once (runs/interrupts.py)
    api_key_id: str = ""  # the id of the API key that sent it: that key's limits apply too (docs/limits.md)

    def to_json(self) -> dict[str, Any]:
        """The fields as they are (not copied): serialise the dict before the spec changes."""
        return {f.name: getattr(self, f.name) for f in _FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSpec:
        names = {f.name for f in fields(cls)}
        spec = cls(**{k: v for k, v in data.items() if k in names})
        spec.history = [tuple(h) for h in spec.history]  # type: ignore[misc]
        return spec


_FIELDS = fields(RunSpec)
