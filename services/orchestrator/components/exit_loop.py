"""ExitLoop: ends the enclosing Loop after the current pass (control flow only, no outputs)."""
from __future__ import annotations

from services.orchestrator.components.base import Component, NodeContext, register


@register
class ExitLoop(Component):
    component_name = "ExitLoop"
    parent_container = "Loop"  # validation refuses an ExitLoop anywhere else

    async def run(self, ctx: NodeContext) -> None:
        # The Loop body runs in a scope of its own; the Loop reads this flag after the pass.
        ctx.scope.exit_requested = True
