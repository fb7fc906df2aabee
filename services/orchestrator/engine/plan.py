"""Compile a checked canvas into an immutable `Plan`: one `BodyPlan` per scope, edges pre-counted.

A scope is the top level or the body of one container (`parent_id`). Edges come from `downstream`,
`upstream` (both directions mean the same edge), the routes a branching component declares
(`Component.routes`: Switch `to` / `end_cpn_ids`, Categorize `to`) and `exception_goto`. An edge from a
child back to its container's start child (RAGFlow's way of ending a pass) is not an edge: the container
repeats the body. Only edges inside one scope are scheduled; a container (`Component.is_container`) runs its
body itself. Nodes not reachable from the scope's root (`begin`, or the container's `child_start` child)
never run, as in RAGFlow, and are left out of the plan. The planner asks each component's class; it never
compares component names. Each component's params are parsed into its class's `params_model` once, by the
validator (`parsed`), and the plan's components are built from those models.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.orchestrator.components import base as cbase
from services.orchestrator.components.params import Params, parse_params
from services.orchestrator.engine.dsl.model import CanvasV2


def component_class(name: str) -> type[cbase.Component]:
    """The class registered under `name`; the plain `Component` (no routes, not a container) for a name not
    registered here, which validation reports or (a pending component) accepts."""
    try:
        return cbase.get_class(name)
    except cbase.UnknownComponent:
        return cbase.Component


def goto_targets(params: Params) -> list[Any]:
    return cbase.id_list(params.exception_goto)


def parse_all(canvas: CanvasV2) -> dict[str, Params]:
    """Every component's params model, for a canvas that passed validation (a component whose params do
    not parse gets the bare `Params` of its extra keys)."""
    out = {}
    for cid, c in canvas.components.items():
        parsed, _ = parse_params(component_class(c.name), cid, c.params, require_available=False)
        out[cid] = parsed if parsed is not None else Params.model_construct(**c.params)
    return out


@dataclass(slots=True)
class Graph:
    """Edges of a canvas, before any check: `out[a]` = ordered targets, `goto_only[a]` the subset
    reached only through `exception_goto`."""

    scope_of: dict[str, str]
    out: dict[str, list[str]]
    goto_only: dict[str, set[str]]


def build_graph(canvas: CanvasV2, parsed: dict[str, Params]) -> Graph:
    """`parsed`: the params models by component id (the validator's)."""
    comps = canvas.components
    scope_of = {cid: (c.parent_id or "") for cid, c in comps.items()}
    out: dict[str, list[str]] = {cid: [] for cid in comps}
    goto_only: dict[str, set[str]] = {cid: set() for cid in comps}

    def add(a: str, b: Any) -> None:
        if isinstance(b, str) and b in comps and b not in out[a] and not _back_to_item(a, b):
            out[a].append(b)

    def _back_to_item(a: str, b: str) -> bool:
        # RAGFlow's Iteration form: the last child of an Iteration (or Loop) points back to its
        # IterationItem (LoopItem), which moves on to the next item. The container already runs its
        # body once per item, so that edge means "this pass is done", not a cycle to schedule.
        parent = comps[b].parent_id
        if parent is None or parent not in comps or comps[a].parent_id != parent or a == b:
            return False
        container = component_class(comps[parent].name)
        return container.is_container and container.child_start == comps[b].name

    for cid, c in comps.items():
        for t in c.downstream:
            add(cid, t)
        for _, t in component_class(c.name).routes(parsed[cid]):
            add(cid, t)
        normal = set(out[cid])
        for t in goto_targets(parsed[cid]):
            if t not in normal:
                goto_only[cid].add(t)
            add(cid, t)
    for cid, c in comps.items():
        for u in c.upstream:
            if u in comps:
                add(u, cid)
    return Graph(scope_of, out, goto_only)


@dataclass(slots=True, eq=False)
class NodePlan:
    id: str
    name: str  # component_name
    display: str  # graph display name, "" without a graph
    params: dict[str, Any]
    component: cbase.Component
    succ: tuple[str, ...]  # every scheduled out-edge
    goto_only: frozenset[str]  # out-edges taken only on exception_goto
    goto: tuple[str, ...]  # exception_goto targets
    n_in: int
    max_retries: int
    delay_s: float
    on_error: str  # "", "comment" or "goto"
    default_value: Any
    exception_output: str  # which output receives the default value
    has_thoughts: bool = False  # the class overrides thoughts() (skipped otherwise: hot path)
    body: BodyPlan | None = None


@dataclass(slots=True, eq=False)
class BodyPlan:
    owner: str  # "" for the top level, else the Iteration/Loop id
    nodes: dict[str, NodePlan]
    roots: tuple[str, ...]
    indeg: dict[str, int] = field(default_factory=dict)  # copied per run: edges still pending


@dataclass(slots=True, eq=False)
class Plan:
    canvas: CanvasV2
    top: BodyPlan
    known: frozenset[str]
    declared: dict[str, dict[str, Any]]  # DSL-declared outputs by component id
    display: dict[str, str] = field(default_factory=dict)
    bodies: dict[str, BodyPlan] = field(default_factory=dict)  # container id -> its children

    @property
    def variables(self) -> Any:
        return self.canvas.variables

    def component_params(self, component_id: str) -> dict[str, Any]:
        """The params of a component of this canvas ({} for an unknown id)."""
        cpn = self.canvas.components.get(component_id)
        return cpn.params if cpn is not None else {}


def build_plan(canvas: CanvasV2, parsed: dict[str, Params] | None = None) -> Plan:
    """Compile a canvas that passed validation (all classes registered). `parsed`: the params models the
    validator made (parsed here when not given)."""
    if parsed is None:
        parsed = parse_all(canvas)
    comps = canvas.components
    bodies = _Bodies(canvas, build_graph(canvas, parsed), parsed)
    declared = {cid: c.params.get("outputs") for cid, c in comps.items()
                if isinstance(c.params.get("outputs"), dict)}
    top = bodies.body("")
    return Plan(canvas=canvas, top=top, known=frozenset(comps), declared=declared,
                display=bodies.display, bodies=bodies.bodies)


class _Bodies:
    """The body of the canvas and of each container in it, built recursively. (A class, not a closure calling
    itself: such a closure is a reference cycle that keeps the compile's graph until a full collection.)"""

    def __init__(self, canvas: CanvasV2, g: Graph, parsed: dict[str, Params]) -> None:
        self.g = g
        self.comps = canvas.components
        self.parsed = parsed
        self.display = canvas.display_names()
        self.bodies: dict[str, BodyPlan] = {}
        self.by_scope: dict[str, list[str]] = {}
        for cid, scope in g.scope_of.items():
            self.by_scope.setdefault(scope, []).append(cid)

    def body(self, owner: str) -> BodyPlan:
        g, comps, by_scope = self.g, self.comps, self.by_scope
        members = set(by_scope.get(owner, ()))
        if owner:
            start = component_class(comps[owner].name).child_start
            roots = tuple(c for c in by_scope.get(owner, ()) if comps[c].name == start)
        else:
            roots = ("begin",)
        # Reachable members only, following in-scope edges.
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(t for t in g.out[n] if t in members)
        n_in = {n: 0 for n in seen}
        for n in seen:
            for t in g.out[n]:
                if t in seen:
                    n_in[t] += 1
        nodes: dict[str, NodePlan] = {}
        for n in (c for c in by_scope.get(owner, ()) if c in seen):  # canvas order, deterministic
            nodes[n] = _node(n, comps[n].name, comps[n].params, self.parsed[n], self.display.get(n, ""),
                             tuple(t for t in g.out[n] if t in seen),
                             frozenset(g.goto_only[n] & seen), n_in[n])
            nodes[n].component.streams_downstream = any(
                component_class(comps[t].name).reads_streams for t in nodes[n].succ if t not in nodes[n].goto_only)
            if nodes[n].component.is_container:
                nodes[n].body = self.bodies[n] = self.body(n)
        return BodyPlan(owner, nodes, roots, {n: p.n_in for n, p in nodes.items()})


def _node(cid: str, name: str, params: dict[str, Any], model: Params, display: str, succ: tuple[str, ...],
          goto_only: frozenset[str], n_in: int) -> NodePlan:
    cls = cbase.get_class(name)
    method = model.exception_method or ""
    return NodePlan(
        id=cid, name=name, display=display, params=params, component=cls(cid, model),
        succ=succ, goto_only=goto_only,
        goto=tuple(t for t in goto_targets(model) if t in succ), n_in=n_in,
        max_retries=max(0, _int(model.max_retries, 0)),
        delay_s=max(0.0, _float(model.delay_after_error, 2.0)),
        on_error=method if method in ("comment", "goto") else "",
        default_value=model.exception_default_value,
        exception_output=getattr(cls, "exception_output", "result"),
        has_thoughts=cls.thoughts is not cbase.Component.thoughts,
    )


def _int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _float(v: Any, default: float) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default
