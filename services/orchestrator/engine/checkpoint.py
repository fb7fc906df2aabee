"""Checkpoints of a run, and the replay that resumes a run from them without running anything twice.

A `NodeRecord` says what one finished (or pruned) component left behind: its outputs, the branch it chose, the
variables and outputs it wrote (`set_global` / `assign`), and the run's references when they grew. The engine
hands one record per component to the run manager as the component finishes; the run manager appends them to
the run's checkpoint list in Redis (increments, never the whole state).

To resume, the engine walks the same graph again with a `Replay` of those records: a component that has a
record is restored instead of run (outputs back in its scope, its writes applied again, its branch taken), so
the frontier, the variables and Iteration/Loop progress come back exactly, and a finished LLM or tool call is
never sent again. Components without a record run as usual.

A component is identified by its scope path, its id and its occurrence: a Loop runs its children under the
same path once per pass, so the n-th run of (path, id) takes the n-th record of (path, id).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["NodeRecord", "Replay", "node_key"]


def node_key(path: Iterable[str], node_id: str) -> str:
    """One string per (scope path, component id): how records and stream entries name a component."""
    return "/".join((*path, node_id))


@dataclass(slots=True)
class NodeRecord:
    node_id: str
    path: tuple[str, ...] = ()
    outputs: dict[str, Any] = field(default_factory=dict)
    route: list[str] | None = None  # ids a branch chose; None: every normal edge
    writes: list[tuple[str, str, Any]] = field(default_factory=list)  # ("global" | "assign", ref, value)
    retrieval: dict[str, Any] | None = None  # the run's references after this component, when they grew
    skipped: bool = False  # pruned by a branch: nothing ran, nothing to restore but the pruning itself

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.node_id}
        if self.path:
            out["p"] = list(self.path)
        if self.skipped:
            out["s"] = 1
            return out
        out["o"] = self.outputs
        if self.route is not None:
            out["r"] = self.route
        if self.writes:
            out["w"] = [list(w) for w in self.writes]
        if self.retrieval is not None:
            out["ref"] = self.retrieval
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeRecord:
        return cls(node_id=data["n"], path=tuple(data.get("p") or ()), outputs=data.get("o") or {},
                   route=data.get("r"), writes=[tuple(w) for w in data.get("w") or ()],
                   retrieval=data.get("ref"), skipped=bool(data.get("s")))


class Replay:
    """The records of an earlier attempt, handed out in the order their components run again."""

    __slots__ = ("_ran", "_pruned", "resume_inputs", "answer")

    def __init__(self, records: Iterable[NodeRecord], resume_inputs: dict[str, dict[str, Any]] | None = None,
                 answer: str = "") -> None:
        self._ran: dict[str, deque[NodeRecord]] = {}
        self._pruned: dict[str, deque[NodeRecord]] = {}
        for r in records:
            table = self._pruned if r.skipped else self._ran
            table.setdefault(node_key(r.path, r.node_id), deque()).append(r)
        # node key -> the answer a paused component (UserFillUp) gets when the run resumes there
        self.resume_inputs = dict(resume_inputs or {})
        self.answer = answer  # what the earlier attempt already answered (restored Messages send nothing anew)

    def take(self, path: tuple[str, ...], node_id: str) -> NodeRecord | None:
        """The record of this component's next occurrence, if it finished before."""
        q = self._ran.get(node_key(path, node_id))
        return q.popleft() if q else None

    def take_pruned(self, path: tuple[str, ...], node_id: str) -> bool:
        """Whether this pruning was already reported (its event is in the run's stream)."""
        q = self._pruned.get(node_key(path, node_id))
        if q:
            q.popleft()
            return True
        return False

    def take_resume_inputs(self, path: tuple[str, ...], node_id: str) -> dict[str, Any] | None:
        return self.resume_inputs.pop(node_key(path, node_id), None)
