"""VariableAggregator: one output per group, the first truthy variable of the group.

Params: `groups=[{"group_name": "picked", "type": "string", "variables": [{"value": "<ref>"}]}]`.
Typical use joins branches: each variable is the output of a different branch, and only the branch
that ran has produced a value. As in RAGFlow, "first available" means first *truthy* (an empty
string or 0 is skipped). A stream still being produced counts as a value and is passed on as is, so
a downstream Message keeps streaming it. When no variable of a group has a value the output is None
(RAGFlow leaves it unset, which downstream readers also see as None).
"""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WrapValidator

from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, Params, Required, validator
from services.orchestrator.engine.variables import StreamValue


def _ref(value: Any) -> Any:
    if not value or not isinstance(value, str):
        raise ValueError("must be a variable reference")
    return value


class Selector(Entry):
    value: Annotated[Any, validator(_ref), Field(validate_default=True)] = None


def _bare_ref(selector: Any, handler: Any) -> Any:
    # RAGFlow stores {"value": ref}; a bare ref string is accepted too.
    return _ref(selector) if isinstance(selector, str) else handler(selector)


def _selector_ref(selector: Selector | str) -> str:
    return selector.value if isinstance(selector, Selector) else selector


class Group(Entry):
    group_name: Required(Any, "must not be empty") = None  # type: ignore[valid-type]
    variables: Required(  # type: ignore[valid-type]
        list[Annotated[Selector, WrapValidator(_bare_ref)]], "must not be empty") = None


class VariableAggregatorParams(Params):
    groups: Required(list[Group], "must not be empty") = None  # type: ignore[valid-type]


@register
class VariableAggregator(Component):
    component_name = "VariableAggregator"
    params_model = VariableAggregatorParams
    params: VariableAggregatorParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "Aggregating variables from canvas and grouping as configured."

    async def run(self, ctx: NodeContext) -> None:
        for group in self.params.groups:
            name = group.group_name
            refs = [_selector_ref(s) for s in group.variables]
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
