"""What one run leaves behind, gathered from its event stream: its references, how it ended, and its trace (tool
calls and Agent thoughts). The run manager feeds it every event, sets the answer the engine collected
(runner.Running.answer) and persists it at the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.orchestrator.engine import events as ev
from services.orchestrator.engine.checkpoint import node_key


@dataclass
class TurnRecord:
    answer: str = ""  # the engine's, set at the end
    reference: dict[str, Any] = field(default_factory=dict)
    status: str = "failed"
    error: str = "run ended without a result"
    tool_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    thoughts: list[dict[str, Any]] = field(default_factory=list)
    tips: str = ""  # what a UserFillUp asked, shown as the turn's answer while the run waits
    waiting_for: str = ""  # the component (checkpoint.node_key) that waits for the user

    def observe(self, event: ev.Event) -> None:
        if event.__class__ is ev.MessageDelta:  # the most frequent event; the answer is the engine's
            return
        if isinstance(event, ev.MessageEnd) and not event.path and event.reference:
            self.reference = event.reference
        elif isinstance(event, (ev.ToolCallStarted, ev.ToolCallFinished)):
            self._tool_call(event)
        elif isinstance(event, ev.NodeFinished) and isinstance(event.outputs.get("agent_thoughts"), list):
            self.thoughts.extend({"component_id": event.node_id, "path": list(event.path), **t}
                                 for t in event.outputs["agent_thoughts"] if isinstance(t, dict))
        elif isinstance(event, ev.UserInputRequired):
            self.tips, self.waiting_for = event.tips, node_key(event.path, event.node_id)
        elif isinstance(event, ev.RunFinished):
            if event.waiting_for_user:
                self.ended("waiting_for_user")
            else:
                self.ended("cancelled" if event.cancelled else "failed" if event.error else "succeeded", event.error or "")

    def ended(self, status: str, error: str = "") -> None:
        self.status, self.error = status, error

    def text(self) -> str:
        return self.answer or (self.tips if self.status == "waiting_for_user" else "")

    def _tool_call(self, event: ev.ToolCallStarted | ev.ToolCallFinished) -> None:
        """One entry per call, RAGFlow's shape: {path, tool_name, arguments, result, elapsed_time} plus error."""
        entry = self.tool_calls.setdefault(event.call_id, {"call_id": event.call_id, "component_id": event.node_id,
                                                           "path": list(event.path), "tool_name": event.tool_name})
        if isinstance(event, ev.ToolCallStarted):
            entry["arguments"] = event.arguments
        else:
            entry.update(result=event.result, error=event.error, elapsed_time=event.elapsed_s)
