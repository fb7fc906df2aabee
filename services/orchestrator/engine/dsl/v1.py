"""RAGFlow DSL v1 <-> v2, lossless: `v1_to_v2` then `v2_to_v1` gives back the same JSON.

v1 is RAGFlow's format as it is: a bare DSL (`{"components", "globals", "graph", ...}`) or a template
(`{"id", "title", "dsl": {...}, ...}`). Unknown keys are kept at every level. Run state is split off
into a `SessionState`; `v2_to_v1(canvas, state)` writes it back (fresh defaults without a state).
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from services.orchestrator.engine.dsl.model import CanvasV2, ComponentV2
from services.orchestrator.engine.state import RUN_STATE_KEYS, SessionState

_ENTRY_KEYS = ("obj", "downstream", "upstream", "parent_id")
_OBJ_KEYS = ("component_name", "params")
_DEFAULT_LAYOUT = ("obj", "downstream", "upstream")
_DEFAULT_OBJ_LAYOUT = ("component_name", "params")
_CANVAS_KEYS = ("components", "variables", "graph")
_DEFAULT_TOP = ("components", "globals", "variables", "history", "path", "retrieval", "memory", "graph")


class DslError(ValueError):
    """The input is not a canvas at all (e.g. no `components` map). Names where it broke."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def is_template(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("dsl"), dict) and "components" not in doc


def v1_to_v2(doc: Mapping[str, Any]) -> tuple[CanvasV2, SessionState]:
    """A v1 DSL or template -> (canvas, the run state it carried)."""
    template = None
    template_layout = None
    dsl = doc
    if is_template(doc):
        dsl = doc["dsl"]
        template = {k: copy.deepcopy(v) for k, v in doc.items() if k != "dsl"}
        template_layout = tuple(doc.keys())
    comps = dsl.get("components")
    if not isinstance(comps, dict):
        raise DslError("components", "a canvas needs a 'components' object")
    components = {cid: _entry_to_v2(cid, entry) for cid, entry in comps.items()}
    variables = dsl.get("variables")
    extra = {k: copy.deepcopy(v) for k, v in dsl.items()
             if k not in _CANVAS_KEYS and k not in RUN_STATE_KEYS}
    if variables is not None and not isinstance(variables, (dict, list)):
        raise DslError("variables", "must be an object {name: {type, value}}")
    for key in ("history", "path", "memory"):  # run state: lists when present (fuzzed in test_fuzz_dsl.py)
        if dsl.get(key) and not isinstance(dsl[key], list):
            raise DslError(key, f"must be a list, not {type(dsl[key]).__name__}")
    graph = dsl.get("graph")
    if graph is not None and not isinstance(graph, dict):
        extra["graph"] = copy.deepcopy(graph)  # unusual, keep it verbatim
        graph = None
    canvas = CanvasV2(
        components=components,
        variables=copy.deepcopy(variables) if variables is not None else {},
        graph=copy.deepcopy(graph),
        extra=extra,
        layout=tuple(dsl.keys()),
        template=template,
        template_layout=template_layout,
    )
    return canvas, SessionState.from_v1(dsl)


def _entry_to_v2(cid: str, entry: Any) -> ComponentV2:
    if not isinstance(entry, dict):
        raise DslError(cid, "a component entry must be an object")
    obj = entry.get("obj")
    if not isinstance(obj, dict):
        raise DslError(f"{cid}.obj", "missing 'obj' with 'component_name' and 'params'")
    name = obj.get("component_name")
    if not isinstance(name, str) or not name:
        raise DslError(f"{cid}.obj.component_name", "missing or not a string")
    params = obj.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise DslError(f"{cid}.obj.params", "must be an object")
    for key in ("downstream", "upstream"):
        v = entry.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise DslError(f"{cid}.{key}", "must be a list of component ids")
    parent = entry.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        raise DslError(f"{cid}.parent_id", "must be a component id")
    layout = tuple(entry.keys())
    obj_layout = tuple(obj.keys())
    return ComponentV2(
        name=name,
        downstream=list(entry.get("downstream") or []),
        upstream=list(entry.get("upstream") or []),
        parent_id=parent,
        params=copy.deepcopy(params),
        extra={k: copy.deepcopy(v) for k, v in entry.items() if k not in _ENTRY_KEYS},
        obj_extra={k: copy.deepcopy(v) for k, v in obj.items() if k not in _OBJ_KEYS},
        layout=None if layout == _DEFAULT_LAYOUT else layout,
        obj_layout=None if obj_layout == _DEFAULT_OBJ_LAYOUT else obj_layout,
    )


def v2_to_v1(canvas: CanvasV2, state: SessionState | None = None) -> dict[str, Any]:
    """A canvas (+ optional session state) -> RAGFlow v1 JSON, wrapped again if it was a template."""
    if state is None:
        state = SessionState.fresh(canvas.variables)
        if canvas.layout is not None:  # same shape as the source: only the keys it had
            state.present = tuple(k for k in RUN_STATE_KEYS if k in canvas.layout)
    values: dict[str, Any] = {
        "components": {cid: _entry_to_v1(c) for cid, c in canvas.components.items()},
        "variables": copy.deepcopy(canvas.variables),
        "graph": copy.deepcopy(canvas.graph),
        **state.to_v1(),
        **copy.deepcopy(canvas.extra),
    }
    layout = canvas.layout or _DEFAULT_TOP
    dsl: dict[str, Any] = {}
    for k in layout:
        if k in values:
            dsl[k] = values.pop(k)
    # Keys not in the original layout: only emit what carries information.
    for k, v in values.items():
        if k in ("graph",) and v is None:
            continue
        if k == "variables" and not v and canvas.layout is not None:
            continue
        dsl[k] = v
    if canvas.template is None:
        return dsl
    wrapper = copy.deepcopy(canvas.template)
    out: dict[str, Any] = {}
    for k in canvas.template_layout or (*wrapper.keys(), "dsl"):
        out[k] = dsl if k == "dsl" else wrapper.pop(k)
    out.update(wrapper)
    return out


def _entry_to_v1(c: ComponentV2) -> dict[str, Any]:
    obj_values: dict[str, Any] = {"component_name": c.name, "params": copy.deepcopy(c.params),
                                  **copy.deepcopy(c.obj_extra)}
    obj = {k: obj_values.pop(k) for k in (c.obj_layout or _DEFAULT_OBJ_LAYOUT) if k in obj_values}
    obj.update(obj_values)
    values: dict[str, Any] = {"obj": obj, "downstream": list(c.downstream),
                              "upstream": list(c.upstream), **copy.deepcopy(c.extra)}
    if c.parent_id is not None:
        values["parent_id"] = c.parent_id
    layout = c.layout or (*_DEFAULT_LAYOUT, "parent_id")
    entry = {k: values.pop(k) for k in layout if k in values}
    for k, v in values.items():  # a standard key absent from a recorded v1 layout stays absent
        if c.layout is None or k not in _ENTRY_KEYS:
            entry[k] = v
    return entry
