"""Loop: runs its child sub-graph pass after pass until a termination condition holds, an ExitLoop
runs, or `maximum_loop_count` passes are done (0 ends immediately, as in RAGFlow).

Loop variables (`loop_variables`) are the Loop's outputs (`{Loop:X@name}`); children may update them
(VariableAssigner). Conditions are checked before every pass, like RAGFlow's LoopItem. Operators by
value type: str contains / not contains / start with / end with / is / is not / empty / not empty;
number = ≠ > < ≥ ≤ empty / not empty; bool is / is not / empty / not empty; dict empty / not empty;
list contains / not contains / is / is not / empty / not empty. No condition = no early end.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, Number, Params, validator
from services.orchestrator.engine.state import default_for_type
from services.orchestrator.engine.variables import Resolver, Scope, is_ref, to_text

OPERATORS = ("contains", "not contains", "start with", "end with", "is", "is not", "empty",
             "not empty", "=", "≠", ">", "<", "≥", "≤")


def _variable(value: Any) -> str:
    if not is_ref(value):
        raise ValueError("must be a variable reference")
    return value


def _operator(op: Any) -> str:
    if op not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}")
    return op


class Termination(Entry):
    variable: Annotated[Any, validator(_variable), Field(validate_default=True)] = None
    operator: Annotated[Any, validator(_operator), Field(validate_default=True)] = None
    value: Any = ""
    input_mode: Literal["constant", "variable"] = "constant"


class LoopParams(Params):
    maximum_loop_count: Number(ge=0, text=False) = 0  # type: ignore[valid-type]
    logical_operator: Literal["and", "or"] = "and"
    loop_termination_condition: list[Termination] | None = None
    loop_variables: Any = None  # [{variable, input_mode, value, type}]; incomplete rows are skipped


def _truthy(v: Any) -> bool:
    return v if isinstance(v, bool) else to_text(v).strip().lower() in ("true", "1", "yes")


def evaluate(var: Any, op: str, value: Any) -> bool:
    if op == "empty":
        return var is None or (not isinstance(var, (bool, int, float)) and len(var) == 0)
    if op == "not empty":
        return not evaluate(var, "empty", value)
    if var is None:
        return False
    if isinstance(var, str):
        v = to_text(value)
        table = {"contains": lambda: v in var, "not contains": lambda: v not in var,
                 "start with": lambda: var.startswith(v), "end with": lambda: var.endswith(v),
                 "is": lambda: var == v, "is not": lambda: var != v}
    elif isinstance(var, bool):
        table = {"is": lambda: var is _truthy(value), "is not": lambda: var is not _truthy(value)}
    elif isinstance(var, (int, float)):
        def n() -> float:
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ValueError(f"cannot compare the number {var} with {value!r}") from None
        table = {"=": lambda: var == n(), "≠": lambda: var != n(), ">": lambda: var > n(),
                 "<": lambda: var < n(), "≥": lambda: var >= n(), "≤": lambda: var <= n()}
    elif isinstance(var, list):
        table = {"contains": lambda: value in var, "not contains": lambda: value not in var,
                 "is": lambda: var == value, "is not": lambda: var != value}
    else:
        table = {}
    fn = table.get(op)
    if fn is None:
        raise ValueError(f"operator {op!r} does not apply to a {type(var).__name__} value")
    return fn()


@register
class Loop(Component):
    component_name = "Loop"
    is_container = True
    child_start = "LoopItem"
    params_model = LoopParams
    params: LoopParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "Loop from canvas."

    async def run(self, ctx: NodeContext) -> None:
        await self._init_variables(ctx)
        limit = min(int(self.params.maximum_loop_count or 0), ctx.settings.max_loop_count)
        scope = Scope(parent=ctx.scope, aliases={"index": 0})
        conditions = self.params.loop_termination_condition or []
        passes = 0
        while passes < limit:
            if conditions and await self._should_end(ctx, scope, conditions):
                break
            scope.aliases = {"index": passes}
            await ctx.run_children(scope, (*ctx.path, ctx.component_id))
            passes += 1
            if scope.exit_requested:
                break
        ctx.set_input("passes", passes)

    async def _init_variables(self, ctx: NodeContext) -> None:
        for item in self.params.loop_variables or []:
            if not isinstance(item, dict) or not item.get("variable"):
                continue  # incomplete rows are UI leftovers (RAGFlow would refuse to run)
            mode = item.get("input_mode", "constant")
            if mode == "variable":
                value = await ctx.value(item.get("value", ""))
            elif mode == "constant":
                value = item.get("value")
            else:
                value = default_for_type(item.get("type"))
            ctx.set_output(item["variable"], value)

    async def _should_end(self, ctx: NodeContext, scope: Scope, conditions: list[Termination]) -> bool:
        r = Resolver(scope, ctx.env.globals, ctx.env.known)
        results = []
        for cond in conditions:
            var = await r.value(cond.variable)
            value = cond.value
            if cond.input_mode == "variable":
                value = await r.value(value)
            results.append(evaluate(var, cond.operator, value))
        return any(results) if self.params.logical_operator == "or" else all(results)
