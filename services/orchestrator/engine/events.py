"""Domain events of a canvas run (docs/ENGINE_CONTRACT.md); `convert.py` maps them to protobuf. Every event is
built with `<Event>.make(...)` (the engine, components, the run manager).

Order a client relies on: `RunStarted` first; a node's `NodeStarted` before its own `MessageDelta`
and tool-call events; its `NodeFinished` after its last `MessageDelta`; `RunFinished` last, after
`RunError` when the run fails. Every dict value is JSON-serialisable.
"""
from __future__ import annotations

import time
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar, Union


@dataclass(frozen=True, kw_only=True)
class _Base:
    run_id: str
    session_id: str
    node_id: str  # "" for run-level events
    timestamp: float  # epoch seconds
    # Enclosing Iteration/Loop ids, outermost first; an Iteration adds the item index as a string.
    path: tuple[str, ...] = ()
    # `NodeStarted.make(run_id=..., ...)`: the one way an event is built (generated per class, see _maker).
    make: ClassVar[Callable[..., Any]]


@dataclass(frozen=True, kw_only=True)
class RunStarted(_Base):
    inputs: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class NodeStarted(_Base):
    component_name: str  # display name from graph.nodes, or ""
    component_type: str
    thoughts: str = ""
    restarted: bool = False  # it runs again after a take-over: what it sent before is void (runs/resume.py)


@dataclass(frozen=True, kw_only=True)
class NodeFinished(_Base):
    component_name: str
    component_type: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    error: str | None
    elapsed_s: float
    skipped: bool = False


@dataclass(frozen=True, kw_only=True)
class MessageDelta(_Base):
    content: str
    start_to_think: bool = False
    end_to_think: bool = False


@dataclass(frozen=True, kw_only=True)
class MessageEnd(_Base):
    reference: dict[str, Any] = field(default_factory=dict)
    attachment: dict[str, Any] | None = None
    downloads: list[Any] = field(default_factory=list)
    status: str = ""


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted(_Base):
    call_id: str
    tool_name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished(_Base):
    call_id: str
    tool_name: str
    result: str
    error: str | None
    elapsed_s: float


@dataclass(frozen=True, kw_only=True)
class UserInputRequired(_Base):
    inputs: dict[str, Any]
    tips: str


@dataclass(frozen=True, kw_only=True)
class RunError(_Base):
    message: str
    component_id: str
    code: str  # "component_failed", "timeout", "cancelled", "invalid_input", "max_steps", ...


@dataclass(frozen=True, kw_only=True)
class RunFinished(_Base):
    outputs: dict[str, Any]
    elapsed_s: float
    usage: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    cancelled: bool = False
    waiting_for_user: bool = False  # paused at a UserFillUp: a later run on the session resumes there


# No slots, no dataclass __init__: `<Event>.make(...)` is a function generated per class below that takes the
# fields as keywords and sets the instance's __dict__ in one step. The frozen dataclass __init__ (one
# object.__setattr__ per field) costs about three times as much, and a generic `make(cls, **values)` half as
# much again: the engine builds two events per component, so this is its per-node hot path.
def _maker(cls: type) -> Any:
    """`cls.make(**fields)`: the same instance `cls(**fields)` gives (defaults, default factories, frozen)."""
    params, items, env = [], [], {"_new": object.__new__, "_set": object.__setattr__, "cls": cls, "_MISSING": MISSING}
    for f in fields(cls):
        if f.default_factory is not MISSING:
            env[f"f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            items.append(f"{f.name!r}: f_{f.name}() if {f.name} is _MISSING else {f.name}")
        else:
            if f.default is not MISSING:
                env[f"d_{f.name}"] = f.default
            params.append(f.name if f.default is MISSING else f"{f.name}=d_{f.name}")
            items.append(f"{f.name!r}: {f.name}")
    source = (f"def make(*, {', '.join(params)}):\n"
              f"    obj = _new(cls)\n"
              f"    _set(obj, '__dict__', {{{', '.join(items)}}})\n"
              f"    return obj\n")
    exec(source, env)  # noqa: S102 (our own field names only)
    return staticmethod(env["make"])


def run_failed(run_id: str, session_id: str, message: str, code: str, elapsed_s: float) -> list[Any]:
    """RunError then RunFinished(error): the end of a run whose engine could not end it (the engine broke, the
    journal gave up, the run moved to another replica). Every other run ends with the engine's own RunFinished."""
    common = dict(run_id=run_id, session_id=session_id, node_id="", timestamp=time.time())
    return [RunError.make(message=message, component_id="", code=code, **common),
            RunFinished.make(outputs={}, elapsed_s=elapsed_s, error=message, **common)]


def merge_deltas(a: Event, b: Event) -> MessageDelta | None:
    """Two answer deltas of the same node as one (services/common/coalesce.py), else None. Think markers
    stay their own events: each dialect renders them as a separate marker."""
    if (a.__class__ is MessageDelta and b.__class__ is MessageDelta and a.node_id == b.node_id
            and a.path == b.path and a.run_id == b.run_id and not (a.start_to_think or a.end_to_think)
            and not (b.start_to_think or b.end_to_think)):
        return MessageDelta.make(run_id=a.run_id, session_id=a.session_id, node_id=a.node_id,
                                 timestamp=a.timestamp, path=a.path, content=a.content + b.content)
    return None


Event = Union[RunStarted, NodeStarted, NodeFinished, MessageDelta, MessageEnd, ToolCallStarted,
              ToolCallFinished, UserInputRequired, RunError, RunFinished]

for _cls in Event.__args__:
    _cls.make = _maker(_cls)

# What a caller that asked for the answer only (RunSpec.answer_only) is sent: the answer, the pause, the end.
ANSWER_EVENTS = frozenset({RunStarted, MessageDelta, MessageEnd, UserInputRequired, RunError, RunFinished})

__all__ = ["ANSWER_EVENTS", "Event", "merge_deltas", "run_failed", "MessageDelta", "MessageEnd", "NodeFinished", "NodeStarted", "RunError",
           "RunFinished", "RunStarted", "ToolCallFinished", "ToolCallStarted", "UserInputRequired"]
