"""VariableAggregator: one output per group, the first truthy variable of the group.

Params: `groups=[{"group_name": "picked", "type": "string", "variables": [{"value": "<ref>"}]}]`.
Typical use joins branches: each variable is the output of a different branch, and only the branch
that ran has produced a value. As in RAGFlow, "first available" means first *truthy* (an empty
string or 0 is skipped). A stream still being produced counts as a value and is passed on as is, so
a downstream Message keeps streaming it. When no variable of a group has a value the output is None
(RAGFlow leaves it unset, which downstream readers also see as None).
"""
from __future__ import annotations

from typing import Any

from ..variables import StreamValue
from ._fields import FieldError
from .base import Component, NodeContext, ValidationIssue, register


def _group_problems(groups: Any) -> list[tuple[str, str]]:
    """(field, message) for every malformed part of `groups` (RAGFlow's check())."""
    if not groups:
        return [("params.groups", "must not be empty")]
    if not isinstance(groups, list):
        return [("params.groups", "must be a list of groups")]
    problems = []
    for i, group in enumerate(groups):
        where = f"params.groups[{i}]"
        if not isinstance(group, dict):
            problems.append((where, "must be an object with group_name and variables"))
            continue
        if not group.get("group_name"):
            problems.append((f"{where}.group_name", "must not be empty"))
        variables = group.get("variables")
        if not variables:
            problems.append((f"{where}.variables", "must not be empty"))
        elif not isinstance(variables, list):
            problems.append((f"{where}.variables", "must be a list of {\"value\": \"<ref>\"}"))
        else:
            for j, selector in enumerate(variables):
                if not _selector_ref(selector):
                    problems.append((f"{where}.variables[{j}].value", "must be a variable reference"))
    return problems


def _selector_ref(selector: Any) -> str:
    # RAGFlow stores {"value": ref}; a bare ref string is accepted too.
    if isinstance(selector, dict):
        selector = selector.get("value")
    return selector if isinstance(selector, str) else ""


@register
class VariableAggregator(Component):
    component_name = "VariableAggregator"

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        return [ValidationIssue(cpn_id, f, m) for f, m in _group_problems(params.get("groups"))]

    def thoughts(self, ctx: NodeContext) -> str:
        return "Aggregating variables from canvas and grouping as configured."

    async def run(self, ctx: NodeContext) -> None:
        groups = self.params.get("groups")
        problems = _group_problems(groups)
        if problems:
            raise FieldError(ctx.component_id, *problems[0])
        for group in groups:
            name = group["group_name"]
            refs = [_selector_ref(s) for s in group["variables"]]
            ctx.set_input(f"{name}.variables", refs)
            picked: Any = None
            for ref in refs:
                value = ctx.get(ref)
                if isinstance(value, StreamValue) and not value.done:
                    # A stream still being produced comes from a branch that ran: pass it on
                    # as is, so a downstream Message keeps forwarding its tokens live.
                    picked = value
                    break
                if isinstance(value, StreamValue):
                    value = value.text
                if value:
                    picked = value
                    break
            ctx.set_output(name, picked)
