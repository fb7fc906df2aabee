"""Turning stored or submitted DSL text into a checked canvas, with errors that name component and field."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from services.common.errors import InvalidArgument
from services.orchestrator.components.params import Params
from services.orchestrator.engine.dsl import CanvasV2, DslError, load_with_state
from services.orchestrator.engine.plan import Plan, build_plan
from services.orchestrator.engine.state import SessionState
from services.orchestrator.engine.validate import validate


def parse(dsl_json: str, *, require_available: bool,
          parsed: dict[str, Params] | None = None) -> tuple[CanvasV2, SessionState]:
    """Load (v1, template or v2) and validate. `require_available=False` checks structure only, so an agent
    that uses components not implemented here yet (components.PENDING) can still be stored; running it checks everything.
    `parsed` receives each component's params model (for `build_plan`)."""
    if not dsl_json.strip():
        raise InvalidArgument("dsl is required")
    try:
        canvas, state = load_with_state(dsl_json)
    except DslError as exc:
        raise InvalidArgument(f"invalid DSL: {exc}") from None
    issues = validate(canvas, require_available=require_available, parsed=parsed)
    if issues:
        shown = "; ".join(str(i) for i in issues[:10])
        more = f" (and {len(issues) - 10} more)" if len(issues) > 10 else ""
        raise InvalidArgument(f"invalid DSL: {shown}{more}")
    return canvas, state


# RAGFlow's BeginParam default: the greeting of a Begin whose params set no `prologue`.
DEFAULT_PROLOGUE = "Hi! I'm your smart assistant. What can I do for you?"


def prologue(canvas: CanvasV2) -> str:
    """Begin's greeting, the first message of a new session, as RAGFlow's Canvas.get_prologue: the `prologue`
    param, else the default, whatever the mode (`enablePrologue` only tells RAGFlow's UI whether to show it)."""
    begin = canvas.components.get("begin")
    if begin is None:
        return ""
    text = begin.params.get("prologue", DEFAULT_PROLOGUE)
    return text if isinstance(text, str) else ""


_PLAN_CACHE_SIZE = 512
# (tenant, agent id, version id or "" for the draft) -> (the DSL text it was compiled from, its plan).
_plans: OrderedDict[tuple[str, str, str], tuple[str, Plan]] = OrderedDict()
# The same key -> (the DSL text, its compile) while it runs.
_compiling: dict[tuple[str, str, str], tuple[str, asyncio.Task[Plan]]] = {}


def session_canvas(tenant: str, agent_id: str, version_id: str, dsl_json: str) -> CanvasV2:
    """The canvas a new session of this version starts from (for its prologue): the cached plan's canvas when
    a run has compiled this very text, else a structural parse (an agent whose components are not all
    available may still get sessions)."""
    hit = _plans.get((tenant, agent_id, version_id))
    if hit is not None and hit[0] == dsl_json:
        return hit[1].canvas
    return parse(dsl_json, require_available=False)[0]


async def compiled_plan(tenant: str, agent_id: str, version_id: str, dsl_json: str) -> Plan:
    """The checked, compiled plan of an agent's version (or draft), compiled once per process.

    A hit needs the very DSL text the plan came from, so an edited draft (or a re-published version id)
    compiles afresh on every replica without any invalidation message. Plans are immutable, so runs share
    them. An inline DSL (no agent) is compiled each time. Parsing a big DSL is CPU work: it runs in a thread,
    once for all the runs that ask for the same text meanwhile (a burst of first runs of an agent would
    otherwise compile it once each, all at once).
    """
    if not agent_id:
        return await _compile(dsl_json)
    key = (tenant, agent_id, version_id)
    hit = _plans.get(key)
    if hit is not None and hit[0] == dsl_json:
        _plans.move_to_end(key)
        return hit[1]
    pending = _compiling.get(key)
    if pending is None or pending[0] != dsl_json:
        task = asyncio.ensure_future(_compile(dsl_json))
        pending = _compiling[key] = (dsl_json, task)
        task.add_done_callback(lambda done: _compiled(key, pending, done))
    # Shielded: a caller that goes away leaves the compile to the others (and to the cache).
    return await asyncio.shield(pending[1])


async def _compile(dsl_json: str) -> Plan:
    parsed: dict[str, Params] = {}  # params are parsed once: by the validator, for the plan
    canvas, _ = await asyncio.to_thread(parse, dsl_json, require_available=True, parsed=parsed)
    return build_plan(canvas, parsed)


def _compiled(key: tuple[str, str, str], entry: tuple[str, asyncio.Task[Plan]], task: asyncio.Task[Plan]) -> None:
    if _compiling.get(key) is entry:
        del _compiling[key]
    if task.cancelled() or task.exception() is not None:  # (retrieved: its callers raise it)
        return
    _plans[key] = (entry[0], task.result())
    _plans.move_to_end(key)
    while len(_plans) > _PLAN_CACHE_SIZE:
        _plans.popitem(last=False)
