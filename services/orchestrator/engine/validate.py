"""Check a canvas before anything runs; every issue names the component id and the field.

What a component's type adds to the checks comes from its class (`params_model`, `routes`, `is_container`,
`child_start`, `parent_container`: components/base.py); no check compares component names. Each
component's params are parsed into its `params_model` here, once; `compile_plan` builds the plan from those
models, and a pydantic error is an issue naming the component, its type and the field path.

    issues = validate(canvas)                          # [] when the canvas can run here
    issues = validate(canvas, require_available=False) # structure only: components in
                                                       # components.PENDING are accepted
    plan = compile_plan(canvas)                        # raises ValidationFailed(issues)
    issues = validate_file("canvas.json")              # what `trellis validate FILE` prints
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Iterator

from services.orchestrator import components as registry
from services.orchestrator.components.base import Component
from services.orchestrator.components.params import Params, lenient_params, parse_params
from services.orchestrator.engine.dsl import DslError, load_canvas
from services.orchestrator.engine.dsl.issues import ValidationIssue
from services.orchestrator.engine.dsl.model import CanvasV2
from services.orchestrator.engine.plan import Plan, build_graph, build_plan, component_class, goto_targets
from services.orchestrator.engine.variables import find_refs, parse_ref

log = logging.getLogger(__name__)

__all__ = ["ValidationFailed", "ValidationIssue", "compile_plan", "validate", "validate_file"]


class ValidationFailed(Exception):
    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = issues
        head = "; ".join(str(i) for i in issues[:5])
        more = f" (+{len(issues) - 5} more)" if len(issues) > 5 else ""
        super().__init__(f"canvas is not valid: {head}{more}")


def compile_plan(canvas: CanvasV2, *, require_available: bool = True) -> Plan:
    parsed: dict[str, Params] = {}
    issues = validate(canvas, require_available=require_available, parsed=parsed)
    if issues:
        raise ValidationFailed(issues)
    return build_plan(canvas, parsed)


def validate_file(path: str | Path, *, require_available: bool = True) -> list[ValidationIssue]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return [ValidationIssue("", "", f"cannot read {path}: {exc.strerror or exc}")]
    try:
        canvas = load_canvas(text)
    except DslError as exc:
        return [ValidationIssue("", exc.where, str(exc).split(": ", 1)[-1])]
    return validate(canvas, require_available=require_available)


def validate(canvas: CanvasV2, *, require_available: bool = True,
             parsed: dict[str, Params] | None = None) -> list[ValidationIssue]:
    """The canvas's issues; `parsed` (when given) receives each component's params model."""
    comps = canvas.components
    parsed = {} if parsed is None else parsed
    issues: list[ValidationIssue] = []
    add = issues.append
    if not comps:
        return [ValidationIssue("", "components", "a canvas needs at least one component")]
    begin = comps.get("begin")
    if begin is None:
        others = [cid for cid, c in comps.items() if c.name == "Begin"]
        hint = f" (found Begin as '{others[0]}': RAGFlow requires the id 'begin')" if others else ""
        add(ValidationIssue("", "components.begin", f"missing 'begin' component{hint}"))
    elif begin.name != "Begin":
        add(ValidationIssue("begin", "obj.component_name", f"'begin' must be a Begin, not {begin.name}"))

    for cid, c in comps.items():
        issues.extend(i if i.component_name else dataclasses.replace(i, component_name=c.name)
                      for i in _check_component(canvas, cid, require_available, parsed))
    if not issues:  # cycle detection needs sane edges
        issues.extend(_check_cycles(canvas, parsed))
    return issues


def _check_component(canvas: CanvasV2, cid: str, require_available: bool,
                     parsed: dict[str, Params]) -> Iterator[ValidationIssue]:
    comps = canvas.components
    c = comps[cid]
    name = c.name
    cls = component_class(name)
    model, problems = parse_params(cls, cid, c.params, require_available=require_available)
    yield from problems
    if model is not None:
        parsed[cid] = model
    if cls is Component:
        if name in registry.PENDING:
            if require_available:
                yield ValidationIssue(cid, "obj.component_name", f"component {name} is not available yet")
        else:
            known = sorted(set(registry.registered()) | registry.PENDING)
            yield ValidationIssue(cid, "obj.component_name",
                                  f"unknown component_name '{name}' (known: {', '.join(known)})")

    scope = c.parent_id or ""
    if c.parent_id is not None:
        parent = comps.get(c.parent_id)
        if parent is None:
            yield ValidationIssue(cid, "parent_id", f"parent '{c.parent_id}' does not exist")
            scope = None  # type: ignore[assignment]
        elif not component_class(parent.name).is_container:
            yield ValidationIssue(cid, "parent_id",
                                  f"parent '{c.parent_id}' is a {parent.name}, not {_containers()}")
    if cls.is_container:
        start = cls.child_start
        starts = [k for k, o in comps.items() if o.parent_id == cid and o.name == start]
        if len(starts) != 1:
            yield ValidationIssue(cid, "children", f"{name} needs exactly one {start} child "
                                  f"(parent_id '{cid}'), found {len(starts)}")
    if cls.parent_container and not (c.parent_id in comps and comps[c.parent_id].name == cls.parent_container):
        yield ValidationIssue(cid, "parent_id", f"{name} must be the child of a {cls.parent_container}")

    targets = [(f"downstream[{i}]", t) for i, t in enumerate(c.downstream)]
    readable = model if model is not None else lenient_params(cls, c.params)  # bad values: reported above
    if readable is not None:
        targets += _live_routes(cid, cls, readable, comps)
        targets += [(f"params.exception_goto[{i}]", t) for i, t in enumerate(goto_targets(readable))]
    for fld, t in targets:
        if not isinstance(t, str) or t not in comps:
            yield ValidationIssue(cid, fld, f"unknown component '{t}'")
        elif scope is not None and _scope(comps, t) not in (None, scope):
            yield ValidationIssue(cid, fld, f"'{t}' is in {_scope_name(comps[t].parent_id)} but "
                                  f"'{cid}' is in {_scope_name(c.parent_id)}: edges cannot cross an "
                                  "Iteration/Loop boundary")
    for i, u in enumerate(c.upstream):
        if u not in comps:
            yield ValidationIssue(cid, f"upstream[{i}]", f"unknown component '{u}'")

    for fld, ref in _refs_in(c.params, "params"):
        parsed = parse_ref(ref)
        if parsed and parsed[0] == "cpn" and parsed[1] not in comps:
            yield ValidationIssue(cid, fld, f"reference to missing component '{parsed[1]}' in '{ref}'")


def _containers() -> str:
    """"an Iteration or Loop": the container types registered here, for messages."""
    names = sorted(n for n, cls in registry.registered().items() if cls.is_container)
    if not names:
        return "a container"
    text = " or ".join(names)
    return f"an {text}" if text[0] in "AEIOU" else f"a {text}"


def _live_routes(cid: str, cls: type[Component], params: Params,
                 comps: dict[str, Any]) -> list[tuple[str, Any]]:
    """Branch targets to check. A stale id next to live ones in the same branch is dropped with a
    warning (RAGFlow's own Go fixture has one); a branch whose targets are all missing is an error."""
    routes = list(cls.routes(params))
    branches: dict[str, list[tuple[str, Any]]] = {}
    for fld, t in routes:
        branches.setdefault(fld.rsplit("[", 1)[0], []).append((fld, t))
    out: list[tuple[str, Any]] = []
    for items in branches.values():
        live = [(f, t) for f, t in items if isinstance(t, str) and t in comps]
        if live and len(live) < len(items):
            for f, t in items:
                if (f, t) not in live:
                    log.warning("%s: %s: ignoring unknown branch target %r", cid, f, t)
            out.extend(live)
        else:
            out.extend(items)
    return out


def _scope(comps: dict[str, Any], cid: str) -> str | None:
    """Scope id of a component ("" = top level); None when its parent is missing (reported apart)."""
    parent = comps[cid].parent_id
    if parent is None:
        return ""
    return parent if parent in comps else None


def _scope_name(parent: str | None) -> str:
    return f"'{parent}'" if parent else "the top level"


def _refs_in(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every reference inside params: `{...}` in text, and bare `Cpn:Id@var` / `begin@var` strings."""
    if isinstance(value, str):
        if "@" not in value:
            return
        for ref in find_refs(value):
            yield where, ref
        parsed = parse_ref(value) if "{" not in value else None
        # A bare string is a reference only if it looks like one by RAGFlow's id convention;
        # "user@example.com" in a literal must not be flagged.
        if parsed and parsed[0] == "cpn" and (":" in parsed[1] or parsed[1] == "begin"):
            yield where, value.strip()
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _refs_in(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _refs_in(v, f"{where}[{i}]")


def _check_cycles(canvas: CanvasV2, parsed: dict[str, Params]) -> list[ValidationIssue]:
    """Kahn's algorithm per scope; report each cycle once, naming its path."""
    g = build_graph(canvas, parsed)
    issues: list[ValidationIssue] = []
    scopes: dict[str, list[str]] = {}
    for cid, s in g.scope_of.items():
        scopes.setdefault(s, []).append(cid)
    for members in scopes.values():
        mset = set(members)
        indeg = {n: 0 for n in members}
        for n in members:
            for t in g.out[n]:
                if t in mset:
                    indeg[t] += 1
        ready = [n for n in members if indeg[n] == 0]
        while ready:
            n = ready.pop()
            for t in g.out[n]:
                if t in mset:
                    indeg[t] -= 1
                    if indeg[t] == 0:
                        ready.append(t)
        left = {n for n, d in indeg.items() if d > 0}
        reported: set[str] = set()
        for start in (n for n in members if n in left):
            if start in reported:
                continue
            cycle = _find_cycle(start, g.out, left)
            if cycle:
                reported.update(cycle)
                loop = " -> ".join([*cycle, cycle[0]])
                issues.append(ValidationIssue(cycle[0], "downstream",
                                              f"cycle {loop}: only a Loop may repeat components"))
    return issues


def _find_cycle(start: str, out: dict[str, list[str]], within: set[str]) -> list[str] | None:
    path: list[str] = []
    on_path: dict[str, int] = {}
    seen: set[str] = set()

    def dfs(n: str) -> list[str] | None:
        on_path[n] = len(path)
        path.append(n)
        for t in out[n]:
            if t not in within:
                continue
            if t in on_path:
                return path[on_path[t]:]
            if t not in seen:
                found = dfs(t)
                if found:
                    return found
        seen.add(n)
        path.pop()
        del on_path[n]
        return None

    return dfs(start)


def issues_as_json(issues: list[ValidationIssue]) -> str:
    return json.dumps([{"component_id": i.component_id, "field": i.field, "message": i.message}
                       for i in issues], ensure_ascii=False)

