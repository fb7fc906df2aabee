"""LoopItem: the start of a Loop body; outputs the pass number (`index`, from 0)."""
from __future__ import annotations

from services.orchestrator.components.base import Component, NodeContext, register


@register
class LoopItem(Component):
    component_name = "LoopItem"
    parent_container = "Loop"

    def thoughts(self, ctx: NodeContext) -> str:
        return "Next turn..."

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("index", (ctx.scope.aliases or {}).get("index", 0))
