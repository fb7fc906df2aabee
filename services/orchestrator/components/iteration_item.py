"""IterationItem: the start of an Iteration body; outputs the current `item`/`index` (`result` alias)."""
from __future__ import annotations

from services.orchestrator.components.base import Component, NodeContext, register


@register
class IterationItem(Component):
    component_name = "IterationItem"
    parent_container = "Iteration"

    async def run(self, ctx: NodeContext) -> None:
        aliases = ctx.scope.aliases or {}
        ctx.set_output("item", aliases.get("item"))
        ctx.set_output("index", aliases.get("index"))
        ctx.set_output("result", aliases.get("item"))
