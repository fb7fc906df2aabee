"""Switch: the first condition that holds picks the branch (`to`); otherwise `end_cpn_ids` (ELSE).

Operators (RAGFlow): contains, not contains, start with, end with (case-insensitive), empty,
not empty, =, ≠, >, <, ≥, ≤. A numeric input casts the value with float(). Conditions combine their
items with `logical_operator` "and" (default) or "or". Untaken branches are pruned by the runner.
"""
from __future__ import annotations

import numbers
from typing import Annotated, Any, Iterator, Literal

from services.orchestrator.components.base import Component, NodeContext, Route, id_list, register
from services.orchestrator.components.params import Entry, IdList, OptionalRef, Params, Required, validator
from services.orchestrator.engine.variables import to_text

OPERATORS = ("contains", "not contains", "start with", "end with", "empty", "not empty",
             "=", "≠", ">", "<", "≥", "≤")
# ASCII spellings some clients send.
_ALIASES = {"!=": "≠", ">=": "≥", "<=": "≤", "==": "="}


def _operator(op: Any) -> str:
    if _ALIASES.get(op, op) not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}")
    return op


class Item(Entry):
    cpn_id: OptionalRef = None  # the value compared; an item without one is skipped
    operator: Required(Annotated[Any, validator(_operator)], "unknown operator None") = None  # type: ignore[valid-type]
    value: Any = ""


class Condition(Entry):
    items: list[Item] | None = None
    logical_operator: Literal["and", "or", ""] | None = "and"
    to: Required(IdList, "condition has no 'to' target") = None  # type: ignore[valid-type]


class SwitchParams(Params):
    conditions: Required(list[Condition], "a Switch needs at least one condition") = None  # type: ignore[valid-type]
    end_cpn_ids: Required(IdList, "a Switch needs an ELSE target (end_cpn_ids)") = None  # type: ignore[valid-type]


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
    params_model = SwitchParams
    params: SwitchParams

    @classmethod
    def routes(cls, params: SwitchParams) -> Iterator[tuple[str, Any]]:
        for i, cond in enumerate(params.conditions or ()):
            for j, t in enumerate(id_list(cond.to)):
                yield f"params.conditions[{i}].to[{j}]", t
        for j, t in enumerate(id_list(params.end_cpn_ids)):
            yield f"params.end_cpn_ids[{j}]", t

    async def run(self, ctx: NodeContext) -> Route:
        for cond in self.params.conditions:
            res: list[bool] = []
            any_mode = cond.logical_operator == "or"
            for item in cond.items or ():
                ref = item.cpn_id
                if not ref:
                    continue
                value = await ctx.value(ref)
                ctx.set_input(ref, value)
                operand = item.value
                if isinstance(value, numbers.Number) and not isinstance(value, bool):
                    try:
                        operand = float(operand)
                    except (TypeError, ValueError):
                        pass
                ok = compare(value, item.operator, operand)
                res.append(ok)
                if any_mode and ok:
                    return self._route(ctx, cond.to)
            if all(res):
                return self._route(ctx, cond.to)
        return self._route(ctx, self.params.end_cpn_ids)

    @staticmethod
    def _route(ctx: NodeContext, to: Any) -> Route:
        ids = list(to) if isinstance(to, (list, tuple)) else [to] if to else []
        display = ctx.env.display
        ctx.set_output("next", [display.get(i, i) for i in ids])
        ctx.set_output("_next", ids)
        return Route(next=tuple(ids))
