"""Loop: runs its child sub-graph pass after pass until a termination condition holds, an ExitLoop
runs, or `maximum_loop_count` passes are done (0 ends immediately, as in RAGFlow).

Loop variables (`loop_variables`) are the Loop's outputs (`{Loop:X@name}`); children may update them
(VariableAssigner). Conditions are checked before every pass, like RAGFlow's LoopItem. Operators by
value type: str contains / not contains / start with / end with / is / is not / empty / not empty;
number = ≠ > < ≥ ≤ empty / not empty; bool is / is not / empty / not empty; dict empty / not empty;
list contains / not contains / is / is not / empty / not empty. No condition = no early end.
"""
from __future__ import annotations

from typing import Any

from ..state import default_for_type
from ..variables import Resolver, Scope, is_ref, to_text
from .base import Component, NodeContext, ValidationIssue, register

OPERATORS = ("contains", "not contains", "start with", "end with", "is", "is not", "empty",
             "not empty", "=", "≠", ">", "<", "≥", "≤")


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

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        issues = []
        mlc = params.get("maximum_loop_count", 0)
        if isinstance(mlc, bool) or not isinstance(mlc, (int, float)) or mlc < 0:
            issues.append(ValidationIssue(cpn_id, "params.maximum_loop_count", f"must be an integer >= 0, not {mlc!r}"))
        lo = params.get("logical_operator", "and")
        if lo not in ("and", "or"):
            issues.append(ValidationIssue(cpn_id, "params.logical_operator", f"must be 'and' or 'or', not {lo!r}"))
        for i, cond in enumerate(params.get("loop_termination_condition") or []):
            where = f"params.loop_termination_condition[{i}]"
            if not isinstance(cond, dict) or not is_ref(cond.get("variable")):
                issues.append(ValidationIssue(cpn_id, f"{where}.variable", "must be a variable reference"))
                continue
            if cond.get("operator") not in OPERATORS:
                issues.append(ValidationIssue(cpn_id, f"{where}.operator", f"unknown operator {cond.get('operator')!r}"))
            if cond.get("input_mode", "constant") not in ("constant", "variable"):
                issues.append(ValidationIssue(cpn_id, f"{where}.input_mode", "must be 'constant' or 'variable'"))
        return issues

    def thoughts(self, ctx: NodeContext) -> str:
        return "Loop from canvas."

    async def run(self, ctx: NodeContext) -> None:
        await self._init_variables(ctx)
        limit = min(int(self.params.get("maximum_loop_count") or 0), ctx.settings.max_loop_count)
        scope = Scope(parent=ctx.scope, aliases={"index": 0})
        conditions = [c for c in self.params.get("loop_termination_condition") or [] if isinstance(c, dict)]
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
        for item in self.params.get("loop_variables") or []:
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

    async def _should_end(self, ctx: NodeContext, scope: Scope, conditions: list[dict[str, Any]]) -> bool:
        r = Resolver(scope, ctx.env.globals, ctx.env.known)
        results = []
        for cond in conditions:
            var = await r.value(cond["variable"])
            value = cond.get("value", "")
            if cond.get("input_mode", "constant") == "variable":
                value = await r.value(value)
            results.append(evaluate(var, cond.get("operator", ""), value))
        return any(results) if self.params.get("logical_operator", "and") == "or" else all(results)
