"""Building and running canvases in a test: the DSL's component entries, a plan, a run's events, the
`Services` and `NodeContext` a component gets, and registering test components for one test.

    plan = plan_of({"begin": cpn("Begin", ["Message:m"]), "Message:m": cpn("Message", up=["begin"], ...)})
    events = await collect(plan, query="hi")                      # engine settings only, no peers
    events = await run_canvas(dsl, services(llm, sandbox), query="hi")
    of(events, NodeFinished, "Message:m")

Peers are real services on port 0: tests/support/llm_gateway.py and tests/support/sandbox.py.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from services.orchestrator.components import base as cbase
from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import RunFinished
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest, SessionState
from services.orchestrator.engine.validate import compile_plan


def cpn(name: str, down: Iterable[str] = (), params: dict[str, Any] | None = None,
        up: Iterable[str] = (), parent: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"obj": {"component_name": name, "params": params or {}},
                             "downstream": list(down), "upstream": list(up)}
    if parent:
        entry["parent_id"] = parent
    return entry


def plan_of(components: dict[str, Any], **top: Any):
    return compile_plan(load_canvas({"components": components, **top}))


def services(llm: Any = None, sandbox: Any = None, *, settings: EngineSettings | None = None,
             **extra: Any) -> Services:
    """The peers a component reaches: `llm` a running llm_gateway (tests/support/llm_gateway.py)."""
    return Services(settings=settings or EngineSettings(), llm=llm.client if llm else None, sandbox=sandbox,
                    extra=dict(extra))


async def run_plan(plan: Any, svc: Services | None = None, *, query: str = "", inputs: dict[str, Any] | None = None,
                   overrides: dict[str, Any] | None = None, state: SessionState | None = None,
                   run_id: str = "run-1") -> list[Any]:
    """Every event of one run of `plan`; the last is its RunFinished."""
    req = RunRequest(run_id=run_id, session_id="s-1", query=query, inputs=inputs or {}, overrides=overrides or {})
    events = [ev async for ev in run(plan, req, state, svc or Services(settings=EngineSettings()))]
    assert isinstance(events[-1], RunFinished)
    return events


async def run_canvas(dsl: Any, svc: Services, **kw: Any) -> list[Any]:
    return await run_plan(compile_plan(load_canvas(dsl)), svc, **kw)


async def collect(plan: Any, *, settings: EngineSettings | None = None, **kw: Any) -> list[Any]:
    """A run with no peers, only engine settings."""
    return await run_plan(plan, Services(settings=settings or EngineSettings()), **kw)


def of(events: list[Any], cls: type, node: str | None = None) -> list[Any]:
    return [e for e in events if isinstance(e, cls) and (node is None or e.node_id == node)]


def index(events: list[Any], cls: type, node: str) -> int:
    for i, e in enumerate(events):
        if isinstance(e, cls) and e.node_id == node:
            return i
    raise AssertionError(f"no {cls.__name__} for {node}")


def node_ctx(svc: Services, params: dict[str, Any] | None = None, *, query: str = "", component_id: str = "Test:node",
             component_name: str = "Test", overrides: dict[str, Any] | None = None,
             state: SessionState | None = None, **kw: Any) -> NodeContext:
    ctx = NodeContext.for_test(params, services=svc, component_id=component_id, component_name=component_name,
                               globals_={"sys.query": query, **kw.pop("globals_", {})},
                               request=RunRequest(run_id="run-test", query=query, overrides=overrides or {}), **kw)
    ctx.env.state = state if state is not None else SessionState.fresh()
    return ctx


@contextmanager
def registered(*classes: type[Component]) -> Iterator[None]:
    """Register test components for the duration of a test, restoring whatever had those names."""
    saved = {c.component_name: cbase._REGISTRY.get(c.component_name) for c in classes}
    for c in classes:
        cbase._REGISTRY[c.component_name] = c
    try:
        yield
    finally:
        for name, prev in saved.items():
            if prev is None:
                cbase._REGISTRY.pop(name, None)
            else:
                cbase._REGISTRY[name] = prev
