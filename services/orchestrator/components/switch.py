"""Switch: the first condition that holds picks the branch (`to`); otherwise `end_cpn_ids` (ELSE).

Operators (RAGFlow): contains, not contains, start with, end with (case-insensitive), empty,
not empty, =, ≠, >, <, ≥, ≤. A numeric input casts the value with float(). Conditions combine their
items with `logical_operator` "and" (default) or "or". Untaken branches are pruned by the runner.
"""
from __future__ import annotations

import numbers
from typing import Any, Iterator

from ..variables import is_ref, to_text
from .base import Component, NodeContext, Route, ValidationIssue, id_list, register

OPERATORS = ("contains", "not contains", "start with", "end with", "empty", "not empty",
             "=", "≠", ">", "<", "≥", "≤")
# ASCII spellings some clients send.
_ALIASES = {"!=": "≠", ">=": "≥", "<=": "≤", "==": "="}


def _num(v: Any) -> float:
    return float(v)


def compare(value: Any, operator: str, operand: Any) -> bool:
    op = _ALIASES.get(operator, operator)
    if op in ("contains", "not contains", "start with", "end with"):
        if isinstance(value, (list, tuple)) and op in ("contains", "not contains"):
            hit = to_text(operand).lower() in (to_text(v).lower() for v in value)
            return hit if op == "contains" else not hit
        a, b = to_text(value).lower(), to_text(operand).lower()
        if op == "contains":
            return b in a
        if op == "not contains":
            return b not in a
        return a.startswith(b) if op == "start with" else a.endswith(b)
    if op == "empty":
        return not value
    if op == "not empty":
        return bool(value)
    if op == "=":
        return value == operand or (isinstance(value, str) and value == to_text(operand))
    if op == "≠":
        return not (value == operand or (isinstance(value, str) and value == to_text(operand)))
    if op in (">", "<", "≥", "≤"):
        try:
            a, b = _num(value), _num(operand)
        except (TypeError, ValueError):
            a, b = value, operand
        try:
            return {">": a > b, "<": a < b, "≥": a >= b, "≤": a <= b}[op]
        except TypeError:
            return False
    raise ValueError(f"unsupported Switch operator {operator!r}")


@register
class Switch(Component):
    component_name = "Switch"

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        issues: list[ValidationIssue] = []
        conds = params.get("conditions")
        if not isinstance(conds, list) or not conds:
            issues.append(ValidationIssue(cpn_id, "params.conditions", "a Switch needs at least one condition"))
            conds = []
        for i, cond in enumerate(conds):
            where = f"params.conditions[{i}]"
            if not isinstance(cond, dict):
                issues.append(ValidationIssue(cpn_id, where, "must be an object"))
                continue
            if not cond.get("to"):
                issues.append(ValidationIssue(cpn_id, f"{where}.to", "condition has no 'to' target"))
            lo = cond.get("logical_operator", "and")
            if lo not in ("and", "or", None, ""):
                issues.append(ValidationIssue(cpn_id, f"{where}.logical_operator", f"must be 'and' or 'or', not {lo!r}"))
            for j, item in enumerate(cond.get("items") or []):
                w = f"{where}.items[{j}]"
                if not isinstance(item, dict):
                    issues.append(ValidationIssue(cpn_id, w, "must be an object"))
                    continue
                op = item.get("operator")
                if _ALIASES.get(op, op) not in OPERATORS:
                    issues.append(ValidationIssue(cpn_id, f"{w}.operator", f"unknown operator {op!r}"))
                ref = item.get("cpn_id")
                if ref and not is_ref(ref):
                    issues.append(ValidationIssue(cpn_id, f"{w}.cpn_id", f"{ref!r} is not a variable reference"))
        if not params.get("end_cpn_ids"):
            issues.append(ValidationIssue(cpn_id, "params.end_cpn_ids", "a Switch needs an ELSE target (end_cpn_ids)"))
        return issues

    @classmethod
    def routes(cls, params: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        for i, cond in enumerate(params.get("conditions") or []):
            if isinstance(cond, dict):
                for j, t in enumerate(id_list(cond.get("to"))):
                    yield f"params.conditions[{i}].to[{j}]", t
        for j, t in enumerate(id_list(params.get("end_cpn_ids"))):
            yield f"params.end_cpn_ids[{j}]", t

    async def run(self, ctx: NodeContext) -> Route:
        for cond in self.params.get("conditions") or []:
            res: list[bool] = []
            any_mode = cond.get("logical_operator", "and") == "or"
            for item in cond.get("items") or []:
                ref = item.get("cpn_id")
                if not ref:
                    continue
                value = await ctx.value(ref)
                ctx.set_input(ref, value)
                operand = item.get("value", "")
                if isinstance(value, numbers.Number) and not isinstance(value, bool):
                    try:
                        operand = float(operand)
                    except (TypeError, ValueError):
                        pass
                ok = compare(value, item.get("operator", ""), operand)
                res.append(ok)
                if any_mode and ok:
                    return self._route(ctx, cond.get("to"))
            if all(res):
                return self._route(ctx, cond.get("to"))
        return self._route(ctx, self.params.get("end_cpn_ids"))

    @staticmethod
    def _route(ctx: NodeContext, to: Any) -> Route:
        ids = list(to) if isinstance(to, (list, tuple)) else [to] if to else []
        display = ctx.env.display
        ctx.set_output("next", [display.get(i, i) for i in ids])
        ctx.set_output("_next", ids)
        return Route(next=tuple(ids))
