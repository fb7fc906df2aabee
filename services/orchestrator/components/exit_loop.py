"""ExitLoop: ends the enclosing Loop after the current pass (control flow only, no outputs)."""
from __future__ import annotations

from typing import Any

from .base import Component, NodeContext, ValidationIssue, register


@register
class ExitLoop(Component):
    component_name = "ExitLoop"

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        return []  # the runner checks that it sits inside a Loop (parent_id)

    async def run(self, ctx: NodeContext) -> None:
        # The Loop body runs in a scope of its own; the Loop reads this flag after the pass.
        ctx.scope.exit_requested = True
