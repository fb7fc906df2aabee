"""DSL v2: the typed canvas (docs/ARCHITECTURE.md, "Canvases"), with what v1 needs to round-trip losslessly.

`{"version": 2, "components": {id: {name, downstream, upstream, parent_id, params}}}`. Ids are kept
as they are in v1 (RAGFlow relies on the `"<ComponentName>:<Words>"` convention and on `begin`), so
the conversion never renames anything. Params stay a dict: RAGFlow accepts any key in params and a
saved canvas must come back unchanged; each component class parses them into its `params_model` (which
keeps the keys it does not declare) when the plan is compiled (validate.py).

Round-trip data (never used to run): `extra` (unknown keys of the v1 entry), `obj_extra` (unknown
keys of `obj`), `layout` (v1 key order and which standard keys were present), and at canvas level the
UI graph, other top-level keys and the template wrapper. Run state (globals, history, path, retrieval,
memory) is not here: it lives in `state.SessionState`.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ComponentV2(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="RAGFlow component_name, e.g. 'Switch'")
    downstream: list[str] = Field(default_factory=list)
    upstream: list[str] = Field(default_factory=list)
    parent_id: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    # -- v1 round-trip only
    extra: dict[str, Any] = Field(default_factory=dict)
    obj_extra: dict[str, Any] = Field(default_factory=dict)
    layout: tuple[str, ...] | None = None  # v1 entry key order; None = the default order
    obj_layout: tuple[str, ...] | None = None


class CanvasV2(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[2] = 2
    components: dict[str, ComponentV2]
    # Declared conversation variables (`env.*`): {name: {name, type, value, description}}.
    # Some RAGFlow canvases store an empty list here; it is kept as is and means "none".
    variables: dict[str, Any] | list[Any] = Field(default_factory=dict)
    # ReactFlow layout; the engine reads only nodes[].data.name (display names).
    graph: dict[str, Any] | None = None
    # -- v1 round-trip only
    extra: dict[str, Any] = Field(default_factory=dict)  # messages, task_id, unknown keys
    layout: tuple[str, ...] | None = None  # top-level key order of the v1 DSL
    template: dict[str, Any] | None = None  # template wrapper (id, title, ...) without "dsl"
    template_layout: tuple[str, ...] | None = None

    def display_names(self) -> dict[str, str]:
        """component id -> display name (graph.nodes[].data.name), as RAGFlow's events use."""
        out: dict[str, str] = {}
        nodes = (self.graph or {}).get("nodes") if isinstance(self.graph, dict) else None
        for node in nodes or []:
            if isinstance(node, dict) and isinstance(node.get("data"), dict):
                name = node["data"].get("name")
                if isinstance(node.get("id"), str) and isinstance(name, str):
                    out[node["id"]] = name
        return out


# The v2 model is the canvas the engine works with.
Canvas = CanvasV2
